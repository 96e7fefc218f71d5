package cluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	raftwal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
)

// Log store kinds (Config.LogStore).
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
}

// walDir and boltFile are where each store lives in the data dir.
const (
	walDir   = "wal"
	boltFile = "raft.db"
)

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

// openLogStore opens (creating if needed) the log store of kind in dir.
func openLogStore(dir, kind string) (logStore, string, error) {
	kind, err := resolveLogStore(dir, kind)
	if err != nil {
		return nil, "", err
	}
	if kind == LogStoreBolt {
		store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, boltFile)})
		if err != nil {
			return nil, "", fmt.Errorf("cluster: open %s: %w", boltFile, err)
		}
		return store, kind, nil
	}
	path := filepath.Join(dir, walDir)
	if err := os.MkdirAll(path, 0o755); err != nil {
		return nil, "", fmt.Errorf("cluster: %s dir: %w", walDir, err)
	}
	meta := &metadb.BoltMetaDB{}
	w, err := raftwal.Open(path, raftwal.WithMetaStore(meta))
	if err != nil {
		_ = meta.Close()
		return nil, "", fmt.Errorf("cluster: open %s: %w", walDir, err)
	}
	return w, kind, nil
}
