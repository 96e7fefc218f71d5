package group

import (
	"bytes"
	"io"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
)

// A snapshot is handed to writeback every writeBackEvery bytes as it is
// written, each piece once the one before is on disk, and reads back
// whole; a cancelled one leaves nothing.
func TestSnapshotStore_WritesBackAsItGrows(t *testing.T) {
	dir := t.TempDir()
	files, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &SnapshotStore{SnapshotStore: files, dir: filepath.Join(dir, "snapshots")}
	sink, err := s.Create(raft.SnapshotVersionMax, 10, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, ok := sink.(*writeBackSink)
	if !ok {
		t.Fatalf("the sink is a %T, not written back as it grows", sink)
	}
	want := bytes.Repeat([]byte("0123456789abcdef"), (2*writeBackEvery+writeBackEvery/2)/16)
	for p := want; len(p) > 0; p = p[min(len(p), 1<<20):] {
		if _, err := sink.Write(p[:min(len(p), 1<<20)]); err != nil {
			t.Fatal(err)
		}
	}
	if w.hints != 2 {
		t.Fatalf("%d writeback hints for %d bytes, want 2", w.hints, len(want))
	}
	// The first piece was waited for before the second was handed over:
	// no more than one piece is ever queued ahead of the log's syncs.
	if w.waited != w.hinted-writeBackEvery || w.waited == 0 {
		t.Fatalf("waited for %d bytes of the %d handed over, want all but the last piece of %d", w.waited, w.hinted, writeBackEvery)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	_, rc, err := s.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back %d bytes (err %v), want the %d written", len(got), err, len(want))
	}

	c, err := s.Create(raft.SnapshotVersionMax, 20, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(want[:writeBackEvery+1]); err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(); err != nil {
		t.Fatal(err)
	}
	list, err := s.List()
	if err != nil || len(list) != 1 || list[0].ID != sink.ID() {
		t.Fatalf("snapshots after a cancel %v (err %v), want only %s", list, err, sink.ID())
	}
}
