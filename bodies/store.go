package bodies

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// Key names a published body: the raft log index of the entry that
// carried the Publish command and the command's position in the entry's
// Envelope.
type Key struct {
	Index uint64
	Pos   uint32
}

// Less orders keys by index, then position.
func (k Key) Less(o Key) bool {
	return k.Index < o.Index || (k.Index == o.Index && k.Pos < o.Pos)
}

func (k Key) String() string { return fmt.Sprintf("%d/%d", k.Index, k.Pos) }

// Live is a key still referenced by the state, with its body's size in
// bytes. It holds the key's fields itself: a snapshot lists one for every
// queued message (5,000,000 at a time), and a Key inside it, padded to 16
// bytes, made each 24 where 16 hold it.
type Live struct {
	Index uint64
	Pos   uint32
	Size  uint32
}

// Key is the key of l.
func (l Live) Key() Key { return Key{Index: l.Index, Pos: l.Pos} }

// ErrMissing is a body that neither a body file nor the log holds.
var ErrMissing = errors.New("bodies: body missing")

// ErrClosed is a Store used after Close.
var ErrClosed = errors.New("bodies: store closed")

// Options tunes a Store; the zero value takes the defaults.
type Options struct {
	// TargetFileSize is the size at which a body file is closed and the
	// next begun (64 MiB).
	TargetFileSize int64
	// RewriteBelow is the share of a file's body bytes still live below
	// which Retain rewrites the file with only its live bodies (0.25).
	// Every rewrite then frees at least three bytes per byte it copies.
	// Negative: never rewrite (files are still deleted once nothing in
	// them is live).
	RewriteBelow float64
	// SmallFileSize and MaxSmallFiles: once more than MaxSmallFiles (8)
	// files are smaller than SmallFileSize (TargetFileSize/8), Retain
	// merges them, so that a trickle of relocations (one stuck message
	// per snapshot) does not leave thousands of files.
	SmallFileSize int64
	MaxSmallFiles int
	// CacheEntries and CacheBytes bound the cache of log entries read
	// (64 entries, 16 MiB); the entry read last is kept whatever its size.
	CacheEntries int
	CacheBytes   int64
}

func (o Options) withDefaults() Options {
	if o.TargetFileSize <= 0 {
		o.TargetFileSize = 64 << 20
	}
	if o.RewriteBelow == 0 {
		o.RewriteBelow = 0.25
	}
	if o.SmallFileSize <= 0 {
		o.SmallFileSize = o.TargetFileSize / 8
	}
	if o.MaxSmallFiles <= 0 {
		o.MaxSmallFiles = 8
	}
	if o.CacheEntries <= 0 {
		o.CacheEntries = 64
	}
	if o.CacheBytes <= 0 {
		o.CacheBytes = 16 << 20
	}
	return o
}

// Store is a node's body files in front of its raft log. See the package
// doc for who owns what.
type Store struct {
	dir  string
	logs raft.LogStore
	opts Options

	// maint serialises the changes to the set of files: Retain,
	// ReadBodies, the deletion of obsolete files, Close.
	maint   sync.Mutex
	nextSeq uint64 // the next file's sequence number (maint)

	// mu guards the set of files and the pin. Readers of files hold it
	// shared for the whole read, so no file is closed under them.
	mu      sync.RWMutex
	files   []*file // ascending by seq: the newest file last
	pin     uint64
	holds   int    // WriteBodies and Hold in progress
	heldPin uint64 // Pin() while holds > 0
	closed  bool

	cache entryCache

	stats struct {
		relocatedBodies, relocatedBytes atomic.Int64
		rewrittenBodies, rewrittenBytes atomic.Int64
		receivedBodies, receivedBytes   atomic.Int64
		deletedFiles, deletedBytes      atomic.Int64
		fileReads, logReads, cacheHits  atomic.Int64
	}
}

// Open opens the body files in dir, creating dir if needed. logs is the
// node's raft log store, which holds every body not in a file. It
// removes the temporary files of writes a crash interrupted and
// completes the replacements a crash interrupted; it reads only the
// files' footers.
func Open(dir string, logs raft.LogStore, opts Options) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bodies: %w", err)
	}
	s := &Store{dir: dir, logs: logs, opts: opts.withDefaults()}
	s.cache.init(s.opts.CacheEntries, s.opts.CacheBytes)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("bodies: %w", err)
	}
	changed := false
	// A file that cannot be read is an error only if no other file
	// replaced it: its replacement may have been written just before
	// the crash that kept it from being deleted.
	broken := map[uint64]error{}
	var brokenSeqs []uint64
	for _, e := range ents {
		name := e.Name()
		if strings.HasSuffix(name, tmpSuffix) {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return nil, fmt.Errorf("bodies: remove an unfinished file: %w", err)
			}
			changed = true
			continue
		}
		seq, ok := parseFileName(name)
		if !ok {
			continue
		}
		s.nextSeq = max(s.nextSeq, seq+1)
		f, err := openFile(filepath.Join(dir, name), seq)
		if err != nil {
			broken[seq] = err
			brokenSeqs = append(brokenSeqs, seq)
			continue
		}
		s.files = append(s.files, f)
	}
	slices.SortFunc(s.files, func(a, b *file) int { return cmpSeq(a.seq, b.seq) })
	replaced := map[uint64]bool{}
	for _, f := range s.files {
		for _, r := range f.replaces {
			replaced[r] = true
		}
	}
	slices.Sort(brokenSeqs)
	for _, seq := range brokenSeqs {
		if !replaced[seq] {
			s.closeFiles()
			return nil, broken[seq]
		}
	}
	kept := s.files[:0]
	for _, f := range s.files {
		if !replaced[f.seq] {
			kept = append(kept, f)
			continue
		}
		_ = f.f.Close()
		if err := os.Remove(f.path); err != nil {
			s.files = kept
			s.closeFiles()
			return nil, fmt.Errorf("bodies: remove a replaced file: %w", err)
		}
		changed = true
	}
	s.files = kept
	for _, seq := range brokenSeqs {
		if err := os.Remove(filepath.Join(dir, fileName(seq))); err != nil {
			s.closeFiles()
			return nil, fmt.Errorf("bodies: remove a replaced file: %w", err)
		}
		changed = true
	}
	if changed {
		if err := syncDir(dir); err != nil {
			s.closeFiles()
			return nil, err
		}
	}
	return s, nil
}

func cmpSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (s *Store) closeFiles() {
	for _, f := range s.files {
		_ = f.f.Close()
	}
	s.files = nil
}

// Get returns the body of k: from a body file, else from its log entry.
// The bytes are the caller's own: a body from a log entry is copied out
// of it, so a delivered message does not keep its whole batch entry
// (about 130 publishes) in memory. k must be a key of a committed entry:
// an uncommitted entry that raft later replaces could stay in the cache.
func (s *Store) Get(k Key) ([]byte, error) {
	b, ok, err := s.getFile(k)
	if ok || err != nil {
		return b, err
	}
	b, err = s.getLog(k, true)
	if errors.Is(err, raft.ErrLogNotFound) {
		// Retain may have relocated it and raft deleted the entry
		// since the files were looked at: the file came first.
		if b, ok, err := s.getFile(k); ok || err != nil {
			return b, err
		}
		return nil, fmt.Errorf("%w: %v is in no body file and its log entry is gone", ErrMissing, k)
	}
	if err != nil {
		return nil, err
	}
	return bytes.Clone(b), nil
}

// getFile reads k from the newest file that has it.
func (s *Store) getFile(k Key) ([]byte, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, false, ErrClosed
	}
	for i := len(s.files) - 1; i >= 0; i-- {
		f := s.files[i]
		if j, ok := f.find(k); ok {
			s.stats.fileReads.Add(1)
			b, err := f.read(j)
			return b, true, err
		}
	}
	return nil, false, nil
}

// inFile says whether a file the store keeps has k.
// InFile says whether a body file holds k: a key that no longer needs
// its log entry.
func (s *Store) InFile(k Key) bool { return s.inFile(k, true) }

func (s *Store) inFile(k Key, activeOnly bool) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for i := len(s.files) - 1; i >= 0; i-- {
		f := s.files[i]
		if activeOnly && f.obsolete {
			continue
		}
		if _, ok := f.find(k); ok {
			return true
		}
	}
	return false
}

// getLog reads k from its log entry, through the cache; cached says
// whether an entry read from the log joins it. The body aliases the
// entry's data.
func (s *Store) getLog(k Key, cached bool) ([]byte, error) {
	data, c, err := s.entry(k.Index, cached)
	if err != nil {
		return nil, err
	}
	var b []byte
	if c != nil {
		b, err = c.body(k.Pos)
	} else {
		b, err = entryBody(data, k.Pos)
	}
	if errors.Is(err, errNotPublish) || errors.Is(err, errNoCommand) {
		// No state holds such a key; if one does, its body is missing.
		return nil, fmt.Errorf("%w: %v: log entry %d: %v", ErrMissing, k, k.Index, err)
	}
	if err != nil {
		return nil, fmt.Errorf("bodies: %v: log entry %d: %w", k, k.Index, err)
	}
	return b, nil
}

// entry is the data of the command entry at index, as it was appended,
// and its place in the cache (nil when it is not cached).
func (s *Store) entry(index uint64, cache bool) ([]byte, *cached, error) {
	if c, ok := s.cache.get(index); ok {
		s.stats.cacheHits.Add(1)
		return c.data, c, nil
	}
	var l raft.Log
	s.stats.logReads.Add(1)
	if err := s.logs.GetLog(index, &l); err != nil {
		if errors.Is(err, raft.ErrLogNotFound) {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("bodies: read log entry %d: %w", index, err)
	}
	if l.Type != raft.LogCommand {
		return nil, nil, fmt.Errorf("bodies: log entry %d is a %v, not a command", index, l.Type)
	}
	if cache {
		return l.Data, s.cache.put(index, l.Data), nil
	}
	return l.Data, nil, nil
}

// Has says whether Get(k) would find a body.
func (s *Store) Has(k Key) bool {
	if s.inFile(k, false) {
		return true
	}
	_, err := s.getLog(k, true)
	return err == nil
}

// Pin is the lowest log index that must be kept: no entry below it holds
// a body the store may still be asked for. It is 0 (keep everything)
// until the first Retain after Open, and it does not move while a
// WriteBodies or a Hold is in progress.
func (s *Store) Pin() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.holds > 0 {
		return s.heldPin
	}
	return s.pin
}

// Hold keeps every body the store can read now readable (no file is
// deleted, Pin does not move) until release is called: for the span from
// opening a snapshot to the end of its WriteBodies, if the caller needs
// it longer than WriteBodies itself holds.
func (s *Store) Hold() (release func()) {
	s.mu.Lock()
	if s.holds == 0 {
		s.heldPin = s.pin
	}
	s.holds++
	s.mu.Unlock()
	var once sync.Once
	return func() { once.Do(s.release) }
}

func (s *Store) release() {
	s.mu.Lock()
	s.holds--
	last := s.holds == 0
	s.mu.Unlock()
	if !last {
		return
	}
	// Whoever holds maint (Retain, ReadBodies, Close) deletes the
	// obsolete files before it lets go, or the next Retain does: the
	// sender of a snapshot does not wait for a Retain's copying.
	if s.maint.TryLock() {
		defer s.unlockMaint()
		_ = s.deleteObsolete()
	}
}

// unlockMaint lets go of maint, then deletes the files that a hold
// released while maint was held left obsolete. Every holder of maint lets
// go through here: such a release could not take maint itself (release),
// and the holder's own deleteObsolete had found the hold still on, so
// without this the files waited for the next Retain, which comes only
// with the next snapshot (a node with nothing more to write kept the
// bodies of a drained backlog on disk).
func (s *Store) unlockMaint() {
	s.maint.Unlock()
	for s.obsoleteUnheld() && s.maint.TryLock() {
		_ = s.deleteObsolete()
		s.maint.Unlock()
	}
}

// obsoleteUnheld reports whether obsolete files wait that no hold keeps.
func (s *Store) obsoleteUnheld() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.holds > 0 || s.closed {
		return false
	}
	for _, f := range s.files {
		if f.obsolete {
			return true
		}
	}
	return false
}

// deleteObsolete deletes the obsolete files unless a hold keeps them
// (maint held).
func (s *Store) deleteObsolete() error {
	s.mu.Lock()
	if s.holds > 0 {
		s.mu.Unlock()
		return nil
	}
	var gone []*file
	kept := s.files[:0:0]
	for _, f := range s.files {
		if f.obsolete {
			gone = append(gone, f)
		} else {
			kept = append(kept, f)
		}
	}
	s.files = kept
	s.mu.Unlock()
	if len(gone) == 0 {
		return nil
	}
	var first error
	for _, f := range gone {
		_ = f.f.Close()
		if err := os.Remove(f.path); err != nil && first == nil {
			first = fmt.Errorf("bodies: %w", err)
			continue
		}
		s.stats.deletedFiles.Add(1)
		s.stats.deletedBytes.Add(f.size)
	}
	if err := syncDir(s.dir); err != nil && first == nil {
		first = err
	}
	return first
}

// Close closes the files. Bodies held by a Hold not yet released stay on
// disk and are deleted by a later Retain.
func (s *Store) Close() error {
	s.maint.Lock()
	defer s.unlockMaint()
	err := s.deleteObsolete()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.closeFiles()
	s.cache.clear()
	return err
}

// Stats describes the store, for metrics and tests.
type Stats struct {
	Files      int   // body files, obsolete ones included
	FileBytes  int64 // their size on disk
	FileBodies int64 // bodies in them
	Obsolete   int   // files waiting for the holds to end to be deleted
	Pin        uint64

	// Since Open:
	RelocatedBodies, RelocatedBytes int64 // copied from the log by Retain
	RewrittenBodies, RewrittenBytes int64 // copied from file to file by Retain
	ReceivedBodies, ReceivedBytes   int64 // written by ReadBodies
	DeletedFiles, DeletedBytes      int64
	FileReads, LogReads, CacheHits  int64 // Get's sources
}

func (s *Store) Stats() Stats {
	st := Stats{Pin: s.Pin()}
	s.mu.RLock()
	for _, f := range s.files {
		st.Files++
		st.FileBytes += f.size
		st.FileBodies += int64(len(f.idx))
		if f.obsolete {
			st.Obsolete++
		}
	}
	s.mu.RUnlock()
	c := &s.stats
	st.RelocatedBodies, st.RelocatedBytes = c.relocatedBodies.Load(), c.relocatedBytes.Load()
	st.RewrittenBodies, st.RewrittenBytes = c.rewrittenBodies.Load(), c.rewrittenBytes.Load()
	st.ReceivedBodies, st.ReceivedBytes = c.receivedBodies.Load(), c.receivedBytes.Load()
	st.DeletedFiles, st.DeletedBytes = c.deletedFiles.Load(), c.deletedBytes.Load()
	st.FileReads, st.LogReads, st.CacheHits = c.fileReads.Load(), c.logReads.Load(), c.cacheHits.Load()
	return st
}
