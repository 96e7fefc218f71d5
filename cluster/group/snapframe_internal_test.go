package group

import (
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/bodies"
)

// A write-ahead log that is mostly live bodies is held below its oldest
// one instead of being relocated; once less than half of it is live, the
// compaction point stands and the store relocates what is left. A bolt
// log is never held.
func TestHoldDenseLog(t *testing.T) {
	dir := t.TempDir()
	store, err := bodies.Open(filepath.Join(dir, "bodies"), raft.NewInmemStore(), bodies.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	f := &FSM{bodies: store}
	logBytes, isWAL := int64(0), true
	walBytes := func() (int64, bool) { return logBytes, isWAL }
	setLog := func(size int) { logBytes = int64(size) }
	live := []bodies.Live{{Key: bodies.Key{Index: 10}, Size: 300}, {Key: bodies.Key{Index: 20}, Size: 300}, {Key: bodies.Key{Index: 90}, Size: 100}}

	setLog(1000) // 700 of 1000 bytes live: held below entry 10
	if got := f.holdDenseLog(live, 50, walBytes); got != 9 {
		t.Fatalf("dense log: compaction point %d, want 9", got)
	}
	setLog(2000) // 700 of 2000: compacted to 50, relocating 10 and 20
	if got := f.holdDenseLog(live, 50, walBytes); got != 50 {
		t.Fatalf("sparse log: compaction point %d, want 50", got)
	}
	setLog(1000)
	if got := f.holdDenseLog(live[2:], 50, walBytes); got != 50 {
		t.Fatalf("nothing live below the compaction point: %d, want 50", got)
	}
	isWAL = false
	if got := f.holdDenseLog(live, 50, walBytes); got != 50 {
		t.Fatalf("bolt log: compaction point %d, want 50", got)
	}
}
