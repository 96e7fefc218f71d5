package group

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
)

// Two groups' storage in two directories of one data dir are apart: what
// one appends the other does not hold, and each reopens with its own.
func TestOpenStorage_GroupsApart(t *testing.T) {
	dataDir := t.TempDir()
	open := func(name string) *Storage {
		t.Helper()
		st, err := OpenStorage(filepath.Join(dataDir, name), StorageOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	a, b := open("a"), open("b")
	if a.Kind() != LogStoreWAL || a.LogPath() != filepath.Join(dataDir, "a", "wal") {
		t.Fatalf("a new group's log: %s at %s, want a write-ahead log in a/wal", a.Kind(), a.LogPath())
	}
	pin := func() uint64 { return 0 }
	if err := a.Logs(pin).StoreLogs([]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("a")}}); err != nil {
		t.Fatal(err)
	}
	if err := b.Logs(pin).StoreLogs([]*raft.Log{{Index: 1, Term: 2, Type: raft.LogCommand, Data: []byte("b1")},
		{Index: 2, Term: 2, Type: raft.LogCommand, Data: []byte("b2")}}); err != nil {
		t.Fatal(err)
	}
	if err := a.Store().SetUint64([]byte("CurrentTerm"), 1); err != nil {
		t.Fatal(err)
	}
	for _, st := range []*Storage{a, b} {
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	a, b = open("a"), open("b")
	defer a.Close()
	defer b.Close()
	for _, c := range []struct {
		st   *Storage
		last uint64
		term uint64
	}{{a, 1, 1}, {b, 2, 0}} {
		last, err := c.st.Entries().LastIndex()
		if err != nil || last != c.last {
			t.Errorf("%s: last index %d, %v; want %d", c.st.dir, last, err, c.last)
		}
		term, _ := c.st.Store().GetUint64([]byte("CurrentTerm"))
		if term != c.term {
			t.Errorf("%s: term %d, want %d", c.st.dir, term, c.term)
		}
	}
}

// The log raft writes keeps compaction below the pin, and counts what is
// appended.
func TestStorage_LogsHoldAndMeter(t *testing.T) {
	st, err := OpenStorage(t.TempDir(), StorageOptions{SnapshotBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	logs := st.Logs(func() uint64 { return 5 })
	for i := uint64(1); i <= 10; i++ {
		if err := logs.StoreLog(&raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: make([]byte, 100)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := st.Meter().Pending(); got != 1000 {
		t.Errorf("metered %d bytes, want 1000", got)
	}
	if err := logs.DeleteRange(1, 8); err != nil {
		t.Fatal(err)
	}
	if first, err := st.Store().FirstIndex(); err != nil || first != 5 {
		t.Errorf("first index after compacting to 8 with a pin at 5: %d, %v; want 5", first, err)
	}
}

// WALBytes is the size of the write-ahead log's files; a bolt log has
// none to read.
func TestStorage_WALBytes(t *testing.T) {
	dir := t.TempDir()
	st, err := OpenStorage(dir, StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	before, ok := st.WALBytes()
	if !ok || before == 0 {
		t.Fatalf("a new write-ahead log: %d bytes, %v", before, ok)
	}
	if err := os.WriteFile(filepath.Join(dir, walDir, "extra"), make([]byte, 1234), 0o600); err != nil {
		t.Fatal(err)
	}
	if after, _ := st.WALBytes(); after-before != 1234 {
		t.Errorf("a 1234-byte file added %d bytes", after-before)
	}
	bolt, err := OpenStorage(t.TempDir(), StorageOptions{LogStore: LogStoreBolt})
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	if n, ok := bolt.WALBytes(); ok {
		t.Errorf("a bolt log has %d WAL bytes", n)
	}
}

// A heartbeat raft answers on its transport's goroutine after Shutdown
// returned writes its term to a store that has closed (hashicorp/raft
// issue 717), and raft panics when that write fails: after Close the
// stable store drops writes instead, and what was stored before stays.
func TestStorage_StableDropsWritesAfterClose(t *testing.T) {
	dir := t.TempDir()
	st, err := OpenStorage(dir, StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Stable().SetUint64([]byte("CurrentTerm"), 3); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Stable().SetUint64([]byte("CurrentTerm"), 4); err != nil {
		t.Fatalf("a term written after Close: %v (raft panics on it)", err)
	}
	if err := st.Stable().Set([]byte("LastVoteCand"), []byte("n2")); err != nil {
		t.Fatalf("a vote written after Close: %v", err)
	}
	st, err = OpenStorage(dir, StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if term, err := st.Stable().GetUint64([]byte("CurrentTerm")); err != nil || term != 3 {
		t.Fatalf("term after reopening: %d, %v; want 3", term, err)
	}
}
