package group

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
)

func TestResolveLogStore(t *testing.T) {
	empty, bolt, wal := t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(bolt, boltFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(wal, walDir), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir, kind, want, err string
	}{
		{empty, "", LogStoreWAL, ""},
		{empty, LogStoreAuto, LogStoreWAL, ""},
		{empty, LogStoreBolt, LogStoreBolt, ""},
		{empty, LogStoreWAL, LogStoreWAL, ""},
		{bolt, LogStoreAuto, LogStoreBolt, ""},
		{bolt, LogStoreBolt, LogStoreBolt, ""},
		{bolt, LogStoreWAL, "", "holds a bolt log"},
		{wal, LogStoreAuto, LogStoreWAL, ""},
		{wal, LogStoreBolt, "", "holds a write-ahead log"},
		{empty, "leveldb", "", "unknown log store"},
	} {
		got, err := resolveLogStore(c.dir, c.kind)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("resolve(%s, %q) = %q, %v; want error %q", filepath.Base(c.dir), c.kind, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("resolve(%s, %q) = %q, %v; want %q", filepath.Base(c.dir), c.kind, got, err, c.want)
		}
	}
}

// TestOpenLogStore_KeepsWhatTheDirHolds writes entries with each store,
// reopens the dir with auto and reads them back from the same store.
func TestOpenLogStore_KeepsWhatTheDirHolds(t *testing.T) {
	for _, kind := range []string{LogStoreWAL, LogStoreBolt} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			s, got, err := openLogStore(dir, kind, inlineMax, nil)
			if err != nil || got != kind {
				t.Fatalf("open %s: %q, %v", kind, got, err)
			}
			logs := []*raft.Log{
				{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("one")},
				{Index: 2, Term: 1, Type: raft.LogCommand, Data: []byte("two")},
			}
			if err := s.StoreLogs(logs); err != nil {
				t.Fatal(err)
			}
			if err := s.SetUint64([]byte("CurrentTerm"), 7); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}

			s, got, err = openLogStore(dir, LogStoreAuto, inlineMax, nil)
			if err != nil || got != kind {
				t.Fatalf("reopen auto: %q, %v; want %q", got, err, kind)
			}
			defer s.Close()
			last, err := s.LastIndex()
			if err != nil || last != 2 {
				t.Fatalf("last index %d, %v; want 2", last, err)
			}
			var l raft.Log
			if err := s.GetLog(2, &l); err != nil || string(l.Data) != "two" {
				t.Fatalf("log 2: %q, %v", l.Data, err)
			}
			if term, err := s.GetUint64([]byte("CurrentTerm")); err != nil || term != 7 {
				t.Fatalf("term %d, %v; want 7", term, err)
			}
		})
	}
}

func TestSegmentFile_PicksTheSegmentHoldingTheIndex(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{
		"00000000000000000001-0000000000000001.wal",
		"00000000000000000100-0000000000000002.wal",
		"00000000000000000100-0000000000000003.wal", // a later segment of the same base
		"00000000000000000300-0000000000000004.wal",
		"wal-meta.db",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for idx, want := range map[uint64]string{
		1:   "00000000000000000001-0000000000000001.wal",
		99:  "00000000000000000001-0000000000000001.wal",
		100: "00000000000000000100-0000000000000003.wal",
		299: "00000000000000000100-0000000000000003.wal",
		500: "00000000000000000300-0000000000000004.wal",
	} {
		if got := segmentFile(dir, idx); got != filepath.Join(dir, want) {
			t.Errorf("segmentFile(%d) = %s, want %s", idx, filepath.Base(got), want)
		}
	}
	if got := segmentFile(filepath.Join(dir, "none"), 5); got != filepath.Join(dir, "none") {
		t.Errorf("no segments: %s, want the dir", got)
	}
}

// TestOpenError_SaysDamageOnlyForContent checks that a store the system
// will not let the node open is not reported as damaged data: moving the
// data dir aside would not cure it.
func TestOpenError_SaysDamageOnlyForContent(t *testing.T) {
	var de *DataError
	if err := openError("raft.db", &fs.PathError{Op: "open", Path: "raft.db", Err: syscall.EACCES}); errors.As(err, &de) {
		t.Errorf("permission denied reported as damage: %v", err)
	}
	if err := openError("raft.db", fmt.Errorf("write: %w", syscall.ENOSPC)); errors.As(err, &de) {
		t.Errorf("a full disk reported as damage: %v", err)
	}
	if err := openError("raft.db", errors.New("invalid database")); !errors.As(err, &de) || de.Path != "raft.db" {
		t.Errorf("invalid database: %v, want a *DataError naming raft.db", err)
	}
}
