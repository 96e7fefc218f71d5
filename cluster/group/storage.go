package group

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// StorageOptions is how a group's storage is opened. The zero value
// opens what the directory holds, or a new write-ahead log.
type StorageOptions struct {
	// LogStore is the log and stable store: LogStoreWAL, LogStoreBolt or
	// LogStoreAuto (default: what the directory already holds, else the
	// write-ahead log).
	LogStore string
	// SnapshotBytes is the bytes of entries appended after which the
	// meter says a snapshot is due (Meter; 0 or less: never by size).
	SnapshotBytes int64
	// Logger receives what opening the storage has to say (a migration);
	// RaftLogger is the snapshot store's, as raft logs (defaults: discard
	// for RaftLogger, slog.Default() for Logger).
	Logger     *slog.Logger
	RaftLogger hclog.Logger
	// InlineMax is the largest entry data kept in the log itself
	// (default 4 MiB, largelog.go). Only tests change it, to write a log
	// as releases before side files did.
	InlineMax int
}

// Storage is one Raft group's storage in its directory: the log and
// stable store (raft-wal's segments under wal/, with entries over
// InlineMax beside them, or raft-boltdb's raft.db), the log cache in
// front of it, the meter of appended bytes, and the file snapshot store
// (snapshots/). It holds nothing of the process: a node opens one per
// group, each on its own directory.
type Storage struct {
	dir   string
	kind  string
	store logStore
	snaps *SnapshotStore
	// entries reads through the cache once Logs made it (bodylogs.go).
	entries *bodyLogs
	meter   *LogMeter
	logs    raft.LogStore // what Logs returned
	stable  *stableUntilClosed
}

// OpenStorage opens (creating if needed) the storage of a group in dir.
// Storage that cannot be read is a *DataError naming the file. A
// write-ahead log written before entries went beside it, holding entries
// raft-wal cannot read, is migrated first (walmigrate.go).
func OpenStorage(dir string, o StorageOptions) (*Storage, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: data dir: %w", err)
	}
	if o.InlineMax <= 0 {
		o.InlineMax = inlineMax
	}
	if o.RaftLogger == nil {
		o.RaftLogger = hclog.NewNullLogger()
	}
	store, kind, err := openLogStore(dir, o.LogStore, o.InlineMax, o.Logger)
	if err != nil {
		return nil, err
	}
	files, err := raft.NewFileSnapshotStoreWithLogger(dir, keepSnapshots+1, o.RaftLogger)
	if err != nil {
		_ = store.Close()
		return nil, fmt.Errorf("cluster: snapshot store: %w", err)
	}
	return &Storage{
		dir:     dir,
		kind:    kind,
		store:   store,
		stable:  &stableUntilClosed{store: store},
		snaps:   &SnapshotStore{SnapshotStore: files, dir: filepath.Join(dir, "snapshots"), step: reapStep, pause: reapPause},
		entries: &bodyLogs{LogStore: store},
		meter:   newLogMeter(o.SnapshotBytes),
	}, nil
}

// Kind is the log store's kind (LogStoreWAL or LogStoreBolt).
func (s *Storage) Kind() string { return s.kind }

// LogPath is the file or folder of the log store.
func (s *Storage) LogPath() string { return logStorePath(s.dir, s.kind) }

// Store is the log as it is on disk (no cache), and raft's stable store.
func (s *Storage) Store() interface {
	raft.LogStore
	raft.StableStore
} {
	return s.store
}

// Entries is the log for readers other than raft (the body store): it
// reads through the log cache once Logs has made it.
func (s *Storage) Entries() raft.LogStore { return s.entries }

// Logs is the log raft writes to: the store behind the log cache, with
// the appended bytes metered (Meter) and compaction held below pin (the
// lowest entry whose bodies the body store may still read from the log;
// 0: none). It is made once, after the body store opened on Entries.
func (s *Storage) Logs(pin func() uint64) raft.LogStore {
	if s.logs != nil {
		panic("group: Storage.Logs called twice")
	}
	cache := newLogCache(512, logCacheBytes, holdingLogs{logStore: s.store, pin: pin})
	cache.giveBack = quietReturn.quiet
	s.entries.cache.Store(cache)
	s.logs = meteredLogs{logCache: cache, meter: s.meter}
	return s.logs
}

// Snapshots is the file snapshot store, which remembers why a snapshot
// could not be opened.
func (s *Storage) Snapshots() *SnapshotStore { return s.snaps }

// Meter counts the bytes appended to the log since the last snapshot.
func (s *Storage) Meter() *LogMeter { return s.meter }

// WALBytes is the size of the write-ahead log's files; false for a bolt
// log, whose size cannot be read cheaply.
func (s *Storage) WALBytes() (int64, bool) {
	if s.kind != LogStoreWAL {
		return 0, false
	}
	entries, err := os.ReadDir(filepath.Join(s.dir, walDir))
	if err != nil {
		return 0, false
	}
	var n int64
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
	}
	return n, true
}

// Segments is the number of files the log is kept in: the write-ahead
// log's segment files, or 1 for a bolt log (one file).
func (s *Storage) Segments() int {
	if s.kind != LogStoreWAL {
		return 1
	}
	names, err := filepath.Glob(filepath.Join(s.dir, walDir, "*.wal"))
	if err != nil {
		return 0
	}
	return len(names)
}

// StartRaft runs start (raft.NewRaft on this storage) and turns what it
// says about damaged data into a *DataError naming the file.
func (s *Storage) StartRaft(start func() (*raft.Raft, error)) (*raft.Raft, error) {
	return newRaft(start, s.store, s.snaps, s.LogPath())
}

// GapBridge passes the RPCs raft's transport receives (in) on to raft
// (its Out), mending the appends that continue a follower's log past
// its snapshot (snapgap.go); mended is told of each.
func (s *Storage) GapBridge(in <-chan raft.RPC, mended func(from, to uint64)) *GapBridge {
	return newGapBridge(in, s.logs, s.snaps, mended)
}

// Stable is raft's stable store (the term and the vote): the log store's,
// until Close.
func (s *Storage) Stable() raft.StableStore { return s.stable }

// Close closes the log store.
func (s *Storage) Close() error {
	s.snaps.close()
	s.stable.close()
	if c := s.entries.cache.Load(); c != nil {
		c.stop()
	}
	return s.store.Close()
}

// stableUntilClosed is raft's stable store until the storage closes, and
// then drops writes. hashicorp/raft answers a leader's heartbeat on the
// transport's goroutine, not its own, so one that passed the shutdown
// check just before Raft.Shutdown can still write the term it carries
// after Shutdown returned and the store closed; raft panics when that
// write fails (hashicorp/raft issue 717, open), which took a node's
// process, or a test binary, down as it stopped. The raft instance is
// gone by then, and what it would write does not matter: a term learnt
// from a heartbeat is learnt again from the next after a restart, and
// the vote the stored term guards is cast only by a running instance,
// whose writes come before Close.
type stableUntilClosed struct {
	mu     sync.RWMutex
	closed bool
	store  raft.StableStore
}

func (s *stableUntilClosed) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

func (s *stableUntilClosed) Set(key, val []byte) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil
	}
	return s.store.Set(key, val)
}

func (s *stableUntilClosed) SetUint64(key []byte, val uint64) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil
	}
	return s.store.SetUint64(key, val)
}

func (s *stableUntilClosed) Get(key []byte) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.store.Get(key)
}

func (s *stableUntilClosed) GetUint64(key []byte) (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.store.GetUint64(key)
}
