package group

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	raftwal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	berrors "go.etcd.io/bbolt/errors"
)

// Log store kinds (StorageOptions.LogStore).
const (
	// LogStoreAuto keeps the store a data dir already has (raft.db means
	// bolt) and picks the write-ahead log for a new one.
	LogStoreAuto = "auto"
	// LogStoreWAL is hashicorp/raft-wal: append-only segment files, one
	// fsync per append.
	LogStoreWAL = "wal"
	// LogStoreBolt is hashicorp/raft-boltdb: a B+tree in raft.db.
	LogStoreBolt = "bolt"
)

// logStore is raft's log and stable store, one object.
type logStore interface {
	raft.LogStore
	raft.StableStore
	io.Closer
	// damage is the last entry that could not be read, if any: raft
	// formats the errors of its store with %v, which loses the file.
	damage() *DataError
}

// walDir and boltFile are where each store lives in the data dir;
// boltLargeDir holds a bolt log's entries over inlineMax (largelog.go).
const (
	walDir       = "wal"
	boltFile     = "raft.db"
	boltLargeDir = "raft-large"
)

// walSegmentSize is the size of a write-ahead log's segment files (raft-wal's
// default), told to raft-wal and to the reuse of freed ones (walfiles.go).
const walSegmentSize = 64 << 20

// resolveLogStore turns kind (possibly auto) into the store to open in dir.
// A data dir never switches store: its log would be lost.
func resolveLogStore(dir, kind string) (string, error) {
	hasBolt := exists(filepath.Join(dir, boltFile))
	hasWAL := exists(filepath.Join(dir, walDir))
	switch kind {
	case "", LogStoreAuto:
		if hasBolt {
			return LogStoreBolt, nil
		}
		return LogStoreWAL, nil
	case LogStoreWAL:
		if hasBolt {
			return "", fmt.Errorf("cluster: log store wal asked for, but %s holds a bolt log (%s); use --raft-log-store bolt or auto", dir, boltFile)
		}
		return LogStoreWAL, nil
	case LogStoreBolt:
		if hasWAL {
			return "", fmt.Errorf("cluster: log store bolt asked for, but %s holds a write-ahead log (%s/); use --raft-log-store wal or auto", dir, walDir)
		}
		return LogStoreBolt, nil
	}
	return "", fmt.Errorf("cluster: unknown log store %q (auto, wal or bolt)", kind)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil || !errors.Is(err, os.ErrNotExist)
}

// openLogStore opens (creating if needed) the log store of kind in dir. A
// store that cannot be opened is a *DataError naming its file. A
// write-ahead log keeps entries over inlineMax out of line (largelog.go),
// and one written before that, holding entries raft-wal cannot read, is
// migrated first (walmigrate.go). inline is inlineMax but in tests that
// write a log as releases before side files did.
func openLogStore(dir, kind string, inline int, log *slog.Logger) (store logStore, _ string, err error) {
	if log == nil {
		log = slog.Default()
	}
	if err := prepareWAL(dir, log.Warn); err != nil {
		return nil, "", err
	}
	kind, err = resolveLogStore(dir, kind)
	if err != nil {
		return nil, "", err
	}
	path := logStorePath(dir, kind)
	// bbolt panics on some damaged pages rather than returning an error.
	defer func() {
		if p := recover(); p != nil {
			store, err = nil, &DataError{Path: path, Err: fmt.Errorf("panic: %v", p)}
		}
	}()
	if kind == LogStoreBolt {
		b, err := raftboltdb.New(raftboltdb.Options{Path: path})
		if err != nil {
			return nil, "", openError(path, err)
		}
		// bbolt copies a value out of its memory map in one move, which
		// neither the scheduler nor the collector can interrupt, and at
		// the message size limit took seconds a read: the same side
		// files as the write-ahead log's keep its values small.
		side := filepath.Join(dir, boltLargeDir)
		if err := os.MkdirAll(side, 0o755); err != nil {
			_ = b.Close()
			return nil, "", fmt.Errorf("cluster: %s dir: %w", boltLargeDir, err)
		}
		if err := syncDir(dir); err != nil {
			_ = b.Close()
			return nil, "", err
		}
		large, err := withLargeEntries(&boltStore{BoltStore: b, path: path}, side, inline)
		if err != nil {
			_ = b.Close()
			if de := (*DataError)(nil); errors.As(err, &de) {
				return nil, "", de
			}
			return nil, "", openError(side, err)
		}
		return large, kind, nil
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		return nil, "", fmt.Errorf("cluster: %s dir: %w", walDir, err)
	}
	meta := &metadb.BoltMetaDB{}
	files := newWrittenSegments(walfs.New(), path, walSegmentSize, log)
	removals := newLaterRemovals(sealedReaders{SegmentFiler: segment.NewFiler(path, files), log: log}, path, log)
	removals.recycle = files.recycle
	w, err := raftwal.Open(path, raftwal.WithMetaStore(meta), raftwal.WithSegmentFiler(removals), raftwal.WithSegmentSize(walSegmentSize))
	if err != nil {
		_ = meta.Close()
		removals.close()
		files.close()
		bad := path
		if strings.Contains(err.Error(), metadb.FileName) {
			bad = filepath.Join(path, metadb.FileName)
		}
		return nil, "", openError(bad, err)
	}
	large, err := withLargeEntries(&walStore{WAL: w, dir: path, removals: removals, files: files}, path, inline)
	if err != nil {
		_ = w.Close()
		removals.close()
		files.close()
		if de := (*DataError)(nil); errors.As(err, &de) {
			return nil, "", de
		}
		return nil, "", openError(path, err)
	}
	return large, kind, nil
}

// openError is a store's failure to open path: a *DataError when the
// content is wrong, a plain error when the system refused (permissions, a
// full disk, too many open files), which wiping the data would not cure.
func openError(path string, err error) error {
	var errno syscall.Errno
	var perr *fs.PathError
	if errors.As(err, &errno) || errors.As(err, &perr) {
		return fmt.Errorf("cluster: open %s: %w", path, err)
	}
	return &DataError{Path: path, Err: err}
}

// logStorePath is the file or folder of the log store of kind in dir.
func logStorePath(dir, kind string) string {
	if kind == LogStoreBolt {
		return filepath.Join(dir, boltFile)
	}
	return filepath.Join(dir, walDir)
}

// DataError is stored raft data (log, stable store or snapshot) that
// cannot be read. Path is the damaged file or folder. The node cannot start
// on it; Error says how to bring it back.
type DataError struct {
	Path string
	Err  error
}

// RecoveryDoc is where the procedure for a node with damaged data is
// written.
const RecoveryDoc = `docs/operations.md, "A node whose data is damaged"`

func (e *DataError) Error() string {
	return fmt.Sprintf("cluster: cannot read %s: %v. This node's raft data is damaged and it cannot start on it. "+
		"While the other nodes hold a quorum, the way back is to stop this node, move its data dir aside, "+
		"and start it again with an empty data dir and the same node id: it rejoins and catches up from the others (%s)",
		e.Path, e.Err, RecoveryDoc)
}

func (e *DataError) Unwrap() error { return e.Err }

// walStore names the segment file in the errors of entries that cannot be
// read: raft panics on them, and the panic is all the operator sees.
type walStore struct {
	*raftwal.WAL
	dir      string
	removals *laterRemovals
	files    *writtenSegments
	bad      atomic.Pointer[DataError]
}

// Close closes the log, stops the making of a spare segment and waits for
// the removal of the segments its truncations freed.
func (s *walStore) Close() error {
	err := s.WAL.Close()
	s.files.close()
	s.removals.close()
	return err
}

func (s *walStore) GetLog(index uint64, l *raft.Log) error {
	err := s.WAL.GetLog(index, l)
	if err == nil || errors.Is(err, raft.ErrLogNotFound) || errors.Is(err, raftwal.ErrClosed) {
		return err
	}
	de := &DataError{Path: segmentFile(s.dir, index), Err: fmt.Errorf("log entry %d: %w", index, err)}
	s.bad.Store(de)
	return de
}

func (s *walStore) damage() *DataError { return s.bad.Load() }

// segmentFile is the segment of the write-ahead log in dir that holds
// index: the one with the highest base index not above it (raft-wal names
// segments "<base index>-<segment id>.wal"), or dir when none does.
func segmentFile(dir string, index uint64) string {
	names, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	if err != nil {
		return dir
	}
	best, bestBase, bestID := dir, uint64(0), uint64(0)
	for _, name := range names {
		var base, id uint64
		if _, err := fmt.Sscanf(filepath.Base(name), "%020d-%016x.wal", &base, &id); err != nil {
			continue
		}
		if base <= index && (base > bestBase || (base == bestBase && id >= bestID)) {
			best, bestBase, bestID = name, base, id
		}
	}
	return best
}

// boltStore names raft.db in the errors of entries that cannot be read.
type boltStore struct {
	*raftboltdb.BoltStore
	path string
	bad  atomic.Pointer[DataError]
}

func (s *boltStore) GetLog(index uint64, l *raft.Log) error {
	err := s.BoltStore.GetLog(index, l)
	if err == nil || errors.Is(err, raft.ErrLogNotFound) || errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return err
	}
	de := &DataError{Path: s.path, Err: fmt.Errorf("log entry %d: %w", index, err)}
	s.bad.Store(de)
	return de
}

func (s *boltStore) damage() *DataError { return s.bad.Load() }

// SnapshotStore is raft's file store (retaining keepSnapshots+1) which
// remembers why snapshots could not be opened, so that a start that
// restores none can name them, and frees the space of the snapshots it
// drops a step at a time (snapreap.go).
type SnapshotStore struct {
	raft.SnapshotStore
	dir string

	mu        sync.Mutex
	failed    map[string]error // snapshot id -> why Open failed
	readers   map[string]int   // snapshot id -> its open readers
	reaping   map[string]bool  // snapshots being shrunk, or shrunk
	shrunk    map[string]bool  // snapshots shrunk
	shrinking bool             // a shrink goroutine runs
	step      int64            // a shrink's pace (reapStep; 0: no shrink)
	pause     time.Duration    // and pause between steps (reapPause)
	closed    bool
	stop      chan struct{}
	wg        sync.WaitGroup
}

// Fail records why snapshot id could not be opened (unreadable).
func (s *SnapshotStore) Fail(id string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed == nil {
		s.failed = map[string]error{}
	}
	s.failed[id] = err
}

// unreadable is the DataError of a start on which no snapshot could be
// restored.
func (s *SnapshotStore) unreadable(cause error) error {
	metas, err := s.List()
	if err != nil || len(metas) == 0 {
		return &DataError{Path: s.dir, Err: cause}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var paths, whys []string
	for _, m := range metas {
		paths = append(paths, filepath.Join(s.dir, m.ID))
		why := "its state could not be restored"
		if err := s.failed[m.ID]; err != nil {
			why = err.Error()
		}
		whys = append(whys, m.ID+": "+why)
	}
	return &DataError{Path: strings.Join(paths, ", "), Err: fmt.Errorf("%w (%s)", cause, strings.Join(whys, "; "))}
}

// newRaft runs start (raft.NewRaft) and turns what it says about damaged
// data into a *DataError. raft panics when an entry it reads at start
// cannot be read: the process would otherwise exit with a panic on every
// start.
func newRaft(start func() (*raft.Raft, error), store logStore, snaps *SnapshotStore, logPath string) (r *raft.Raft, err error) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		r = nil
		perr, ok := p.(error)
		if !ok {
			perr = fmt.Errorf("%v", p)
		}
		var de *DataError
		switch {
		case errors.As(perr, &de):
			err = de
		case errors.Is(perr, raft.ErrLogNotFound):
			// The log has a gap after the snapshot raft restored: the
			// newer snapshot that covered it, or the log, is damaged.
			err = &DataError{Path: logPath + " or " + snaps.dir, Err: fmt.Errorf("the log has no entry after the last readable snapshot: %w", perr)}
		default:
			err = &DataError{Path: logPath, Err: fmt.Errorf("panic: %w", perr)}
		}
	}()
	r, err = start()
	switch {
	case err == nil:
		return r, nil
	case store.damage() != nil:
		return nil, store.damage()
	case strings.Contains(err.Error(), "snapshot"):
		return nil, snaps.unreadable(err)
	}
	return nil, err
}
