package bodies

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sort"

	"github.com/hashicorp/raft"
)

// Retain is called once a snapshot covering the log up to some index is
// durable. live is every key that snapshot references, ascending and
// unique; truncateTo is the index up to which raft wants to delete its
// log prefix. Retain copies the live bodies of entries up to truncateTo
// that no body file holds yet into new body files, makes them durable,
// and only then moves Pin to truncateTo+1. It then deletes the files in
// which nothing is live, and rewrites the files with little live in them
// and the small files once there are too many (Options). Files that a
// WriteBodies or Hold in progress may read are deleted when it ends.
//
// A body in a file whose index is above truncateTo is kept even if live
// does not name it: live may be older than a snapshot received from the
// leader (see claim).
//
// A live body found nowhere is reported (ErrMissing) after everything
// else is done: nothing can bring it back and the other bodies must not
// stay pinned for it. Each relocated body's length is checked against
// its Live.Size, so that a key naming the wrong command fails here
// instead of serving another message's bytes; Pin then stays where it
// was.
func (s *Store) Retain(live []Live, truncateTo uint64) error {
	for i := 1; i < len(live); i++ {
		if !live[i-1].Key().Less(live[i].Key()) {
			return fmt.Errorf("bodies: Retain: live keys not ascending and unique at %v, %v", live[i-1].Key(), live[i].Key())
		}
	}
	s.maint.Lock()
	defer s.unlockMaint()
	s.mu.RLock()
	closed := s.closed
	var files []*file
	for _, f := range s.files {
		if !f.obsolete {
			files = append(files, f)
		}
	}
	s.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	use, claimed := claim(files, live, truncateTo)
	moved, missing, err := s.relocate(live, claimed, truncateTo)
	if err != nil {
		return errors.Join(err, s.deleteObsolete())
	}
	s.mu.Lock()
	s.files = append(s.files, moved...)
	s.pin = max(s.pin, truncateTo+1)
	s.mu.Unlock()
	return errors.Join(missing, s.reclaim(files, use))
}

// usage is what of one file is live: its live records, ascending, and
// their size in bytes (headers included).
type usage struct {
	recs  []int32
	bytes int64
}

// claim finds which file holds each live key. A key in several files
// (a copy received again, or a rewrite a crash left beside its source)
// counts for the newest only, so that the older copy can go.
//
// A body in a file whose index is above truncateTo is kept whether live
// or not. Files hold such bodies only when ReadBodies stored them, and
// then live may be older than the state: a snapshot taken before a
// snapshot from the leader was installed, and persisted after. That
// older live set has every key of the newer state up to its own index
// (a key no longer referenced is never referenced again), but not the
// newer keys above it, which are above its truncateTo too.
func claim(files []*file, live []Live, truncateTo uint64) ([]usage, []bool) {
	use := make([]usage, len(files))
	claimed := make([]bool, len(live))
	for fi := len(files) - 1; fi >= 0; fi-- {
		f, u := files[fi], &use[fi]
		nf := len(f.idx)
		if nf == 0 {
			continue
		}
		lo := sort.Search(len(live), func(i int) bool { return !live[i].Key().Less(f.minKey()) })
		hi := lo + sort.Search(len(live)-lo, func(i int) bool { return f.maxKey().Less(live[lo+i].Key()) })
		mark := func(i, j int) {
			if !claimed[i] {
				claimed[i] = true
				u.recs = append(u.recs, int32(j))
				u.bytes += int64(f.recLen(j))
			}
		}
		// Walk the shorter side, searching the longer, unless both are
		// alike: then one merge.
		switch nl := hi - lo; {
		case nf*16 < nl:
			for j := range nf {
				k := f.key(j)
				i := lo + sort.Search(nl, func(i int) bool { return !live[lo+i].Key().Less(k) })
				if i < hi && live[i].Key() == k {
					mark(i, j)
				}
			}
		case nl*16 < nf:
			for i := lo; i < hi; i++ {
				if j, ok := f.find(live[i].Key()); ok {
					mark(i, j)
				}
			}
		default:
			j := 0
			for i := lo; i < hi; i++ {
				k := live[i].Key()
				for j < nf && f.key(j).Less(k) {
					j++
				}
				if j < nf && f.key(j) == k {
					mark(i, j)
				}
			}
		}
		if f.idx[nf-1] > truncateTo {
			keepAbove(f, u, truncateTo)
		}
	}
	return use, claimed
}

// keepAbove adds to u every record of f above truncateTo.
func keepAbove(f *file, u *usage, truncateTo uint64) {
	cut := sort.Search(len(f.idx), func(j int) bool { return f.idx[j] > truncateTo })
	n := sort.Search(len(u.recs), func(r int) bool { return int(u.recs[r]) >= cut })
	for _, j := range u.recs[n:] {
		u.bytes -= int64(f.recLen(int(j)))
	}
	u.recs = u.recs[:n]
	for j := cut; j < len(f.idx); j++ {
		u.recs = append(u.recs, int32(j))
		u.bytes += int64(f.recLen(j))
	}
}

// relocate copies the live bodies of entries up to truncateTo that no
// file holds into new files. Entries are read once each, outside the
// cache (a relocation is no sign of a coming Get).
func (s *Store) relocate(live []Live, claimed []bool, truncateTo uint64) (_ []*file, missing error, _ error) {
	b := batch{s: s}
	var nMissing int
	var firstMissing Key
	var n, bytes int64
	for i := 0; i < len(live) && live[i].Index <= truncateTo; {
		index := live[i].Index
		j := i
		for j < len(live) && live[j].Index == index {
			j++
		}
		run := live[i:j]
		runClaimed := claimed[i:j]
		i = j
		if !slices.Contains(runClaimed, false) {
			continue
		}
		data, _, err := s.entry(index, false)
		if errors.Is(err, raft.ErrLogNotFound) {
			for r := range run {
				if !runClaimed[r] {
					if nMissing == 0 {
						firstMissing = run[r].Key()
					}
					nMissing++
				}
			}
			continue
		}
		var e *entryBodies
		if err == nil {
			e, err = scanEntry(data)
			if err != nil {
				err = fmt.Errorf("bodies: log entry %d: %w", index, err)
			}
		}
		if err != nil {
			b.abort()
			return nil, nil, fmt.Errorf("bodies: relocate: %w", err)
		}
		for r, l := range run {
			if runClaimed[r] {
				continue
			}
			body, err := e.body(l.Pos)
			if err != nil {
				b.abort()
				return nil, nil, fmt.Errorf("bodies: relocate %v: log entry %d: %w", l.Key(), index, err)
			}
			if len(body) != int(l.Size) {
				b.abort()
				return nil, nil, fmt.Errorf("bodies: relocate %v: the entry's body has %d bytes, the state says %d: the key names another command", l.Key(), len(body), l.Size)
			}
			if err := b.add(l.Key(), body); err != nil {
				b.abort()
				return nil, nil, err
			}
			n++
			bytes += int64(len(body))
		}
	}
	files, err := b.commit(nil)
	if err != nil {
		return nil, nil, err
	}
	s.stats.relocatedBodies.Add(n)
	s.stats.relocatedBytes.Add(bytes)
	if nMissing > 0 {
		missing = fmt.Errorf("%w: %d live bodies (the first %v) are in no body file and their log entries are gone", ErrMissing, nMissing, firstMissing)
	}
	return files, missing, nil
}

// reclaim deletes the files in which nothing is live and rewrites those
// with a small live share, and the small files once there are too many.
func (s *Store) reclaim(files []*file, use []usage) error {
	var dead, rewrite, small []int
	for i, f := range files {
		u := use[i]
		recBytes := int64(f.end) - int64(headerSize)
		switch {
		case len(u.recs) == 0:
			dead = append(dead, i)
		case s.opts.RewriteBelow > 0 && float64(u.bytes) < s.opts.RewriteBelow*float64(recBytes):
			rewrite = append(rewrite, i)
		case f.size < s.opts.SmallFileSize:
			small = append(small, i)
		}
	}
	// Small files merge by size tier (a factor of 8 apart), so that a
	// merge's output moves up a tier and a body is copied once per tier
	// at most, not once per merge.
	tiers := map[int][]int{}
	for _, i := range small {
		t := bits.Len64(uint64(files[i].size)/4096) / 3
		tiers[t] = append(tiers[t], i)
	}
	for _, tier := range tiers {
		if len(tier) > s.opts.MaxSmallFiles {
			rewrite = append(rewrite, tier...)
		}
	}
	slices.Sort(rewrite)
	var moved []*file
	if len(rewrite) > 0 {
		var err error
		if moved, err = s.rewrite(files, use, rewrite); err != nil {
			// The dead files can still go.
			s.obsolete(files, dead, nil)
			return errors.Join(err, s.deleteObsolete())
		}
	}
	s.obsolete(files, append(dead, rewrite...), moved)
	return s.deleteObsolete()
}

// obsolete adds the files moved and marks files[which] obsolete, in one
// step for the readers.
func (s *Store) obsolete(files []*file, which []int, moved []*file) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files = append(s.files, moved...)
	for _, i := range which {
		files[i].obsolete = true
	}
}

// rewrite copies the live records of files[which] into new files that
// replace them.
func (s *Store) rewrite(files []*file, use []usage, which []int) ([]*file, error) {
	type item struct {
		k Key
		f *file
		j int32
	}
	var items []item
	replaces := make([]uint64, 0, len(which))
	for _, i := range which {
		f := files[i]
		replaces = append(replaces, f.seq)
		for _, j := range use[i].recs {
			items = append(items, item{k: f.key(int(j)), f: f, j: j})
		}
	}
	slices.SortFunc(items, func(a, b item) int {
		switch {
		case a.k.Less(b.k):
			return -1
		case b.k.Less(a.k):
			return 1
		}
		return 0
	})
	b := batch{s: s}
	var bytes int64
	for _, it := range items {
		rec, err := it.f.readRecord(int(it.j))
		if err != nil {
			b.abort()
			return nil, fmt.Errorf("bodies: rewrite: %w", err)
		}
		if err := b.addRecord(rec); err != nil {
			b.abort()
			return nil, err
		}
		bytes += int64(len(rec) - recHeader)
	}
	moved, err := b.commit(replaces)
	if err != nil {
		return nil, err
	}
	s.stats.rewrittenBodies.Add(int64(len(items)))
	s.stats.rewrittenBytes.Add(bytes)
	return moved, nil
}
