package group

import (
	"errors"
	"io"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
)

// raft's file store deletes the oldest snapshot once a new one is
// complete. The oldest of a long queue is a file of gigabytes, and
// unlinking it frees all its blocks in one journal transaction: traced
// behind 5,000,000 queued messages (docs/performance.md), that unlink
// held every node's log syncs for 61-126 ms; measured on this project's
// CI machine (ext4 mounted with discard), unlinking a 2 GiB file held a
// 4 KiB append's fsync up to 410 ms and its p99 over the 1.6 s the
// unlink took at 250 ms. Truncated 1 MiB at a time with a pause between,
// the same file's blocks are freed over about 7 s while those fsyncs
// stay at a p99 of 2.5 ms.
//
// So raft's store keeps one snapshot more than raft is shown (List), and
// once a new snapshot is complete the store shrinks the one raft is no
// longer shown, a step at a time, on a goroutine of its own; raft's next
// reap then unlinks an empty file. A snapshot a reader still has open (a
// follower's install) is left whole for raft's reap, which unlinks it as
// before: the reader keeps its descriptor.

// keepSnapshots is how many snapshots raft is shown; the file store
// retains one more, the one being shrunk.
const keepSnapshots = 2

// The pace of a shrink: reapStep bytes cut from the file's end, then
// reapPause (shrinkFile); a store's own (SnapshotStore.step, pause).
const (
	reapStep  int64 = 1 << 20
	reapPause       = 2 * time.Millisecond
)

// errReaping is Open's error for a snapshot being shrunk.
var errReaping = errors.New("the snapshot is being reaped")

// List is raft's list without the snapshot being shrunk.
func (s *SnapshotStore) List() ([]*raft.SnapshotMeta, error) {
	metas, err := s.SnapshotStore.List()
	if err != nil || s.dir == "" {
		return metas, err
	}
	return metas[:min(len(metas), keepSnapshots)], nil
}

// Open is raft's, refusing a snapshot being shrunk and counting the
// readers of the others, which are not shrunk while read; the file's
// checksum is taken as it is read (snapopen.go).
func (s *SnapshotStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, f, err := s.openFile(id)
	if err != nil {
		return nil, nil, err
	}
	return meta, f.stream(0), nil
}

// openFile opens snapshot id for Open, its sum started.
func (s *SnapshotStore) openFile(id string) (*raft.SnapshotMeta, *snapshotFile, error) {
	s.mu.Lock()
	if s.reaping[id] {
		s.mu.Unlock()
		return nil, nil, errReaping
	}
	if s.readers == nil {
		s.readers = map[string]int{}
	}
	s.readers[id]++
	s.mu.Unlock()
	meta, f, err := openSnapshotFile(s.dir, id, func(err error) { s.Fail(id, err) }, func() { s.closeReader(id) })
	if err != nil {
		s.closeReader(id)
		s.Fail(id, err)
		return nil, nil, err
	}
	return meta, f, nil
}

func (s *SnapshotStore) closeReader(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.readers[id]--; s.readers[id] <= 0 {
		delete(s.readers, id)
	}
}

// reap starts shrinking the snapshots raft is no longer shown, unless a
// shrink is under way (it looks again when it ends) or the store closed.
func (s *SnapshotStore) reap() {
	if s.dir == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shrinking || s.closed {
		return
	}
	s.shrinking = true
	if s.stop == nil {
		s.stop = make(chan struct{})
	}
	s.wg.Add(1)
	go s.shrinkAll()
}

// shrinkAll shrinks, one after the other, the snapshots beyond those
// raft is shown that nobody reads.
func (s *SnapshotStore) shrinkAll() {
	defer s.wg.Done()
	for {
		id := s.nextToShrink()
		if id == "" {
			return
		}
		s.shrink(id)
		select {
		case <-s.stop:
			return
		default:
		}
	}
}

// nextToShrink marks and returns the next snapshot to shrink, "" (and
// the shrink over) when there is none.
func (s *SnapshotStore) nextToShrink() string {
	metas, err := s.SnapshotStore.List()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		// Forget what raft's reap has unlinked.
		listed := map[string]bool{}
		for _, m := range metas {
			listed[m.ID] = true
		}
		for id := range s.reaping {
			if !listed[id] {
				delete(s.reaping, id)
				delete(s.shrunk, id)
			}
		}
	}
	if err == nil && !s.closed {
		for _, m := range metas[min(len(metas), keepSnapshots):] {
			if s.readers[m.ID] > 0 || s.shrunk[m.ID] {
				continue
			}
			if s.reaping == nil {
				s.reaping, s.shrunk = map[string]bool{}, map[string]bool{}
			}
			s.reaping[m.ID] = true
			return m.ID
		}
	}
	s.shrinking = false
	return ""
}

// shrink cuts snapshot id's file down to nothing a step at a time.
func (s *SnapshotStore) shrink(id string) {
	shrinkFileUntil(filepath.Join(s.dir, id, "state.bin"), s.step, s.pause, s.stop)
	s.mu.Lock()
	s.shrunk[id] = true
	s.mu.Unlock()
}

// close stops a shrink under way; what is left of the file is shrunk
// after the next snapshot, or unlinked by raft's reap.
func (s *SnapshotStore) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	if s.stop != nil {
		close(s.stop)
	}
	s.mu.Unlock()
	s.wg.Wait()
}
