package group

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/bodies"
	"github.com/raftmq/raftmq/queue"
)

// A write-ahead log that is mostly live bodies is held below its oldest
// one instead of being relocated; once less than half of it is live, the
// compaction point stands and the store relocates what is left. Bodies
// waiting in delayed exchanges do not count as live for this. A bolt
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
	live := []bodies.Live{{Index: 10, Size: 300}, {Index: 20, Size: 300}, {Index: 90, Size: 100}}

	setLog(1000) // 700 of 1000 bytes live: held below entry 10
	if got := f.holdDenseLog(live, 0, 50, walBytes); got != 9 {
		t.Fatalf("dense log: compaction point %d, want 9", got)
	}
	// 700 of 1000 live, but 500 of it waits in delayed exchanges: read
	// out of log order, it is relocated.
	if got := f.holdDenseLog(live, 500, 50, walBytes); got != 50 {
		t.Fatalf("dense with delayed bodies: compaction point %d, want 50", got)
	}
	if got := f.holdDenseLog(live, 150, 50, walBytes); got != 9 {
		t.Fatalf("dense, some of it delayed: compaction point %d, want 9", got)
	}
	setLog(2000) // 700 of 2000: compacted to 50, relocating 10 and 20
	if got := f.holdDenseLog(live, 0, 50, walBytes); got != 50 {
		t.Fatalf("sparse log: compaction point %d, want 50", got)
	}
	setLog(1000)
	if got := f.holdDenseLog(live[2:], 0, 50, walBytes); got != 50 {
		t.Fatalf("nothing live below the compaction point: %d, want 50", got)
	}
	isWAL = false
	if got := f.holdDenseLog(live, 0, 50, walBytes); got != 50 {
		t.Fatalf("bolt log: compaction point %d, want 50", got)
	}
}

// A snapshot copies the bodies of its trailing entries only while some
// wait in delayed exchanges and the log is not held dense: a dense
// backlog held for its consumers is copied no further than its hold.
func TestRelocateTo(t *testing.T) {
	const index, raftTo = 100, 60
	for _, c := range []struct {
		name       string
		compact    uint64
		outOfOrder int64
		want       uint64
	}{
		{"no delayed bodies", raftTo, 0, raftTo},
		{"delayed bodies", raftTo, 4096, index},
		{"held dense, no delayed bodies", 9, 0, 9},
		{"held dense beside delayed bodies", 9, 4096, 9},
	} {
		if got := relocateTo(index, raftTo, c.compact, c.outOfOrder); got != c.want {
			t.Errorf("%s: relocated to %d, want %d", c.name, got, c.want)
		}
	}
}

// listedBodies is a snapshot's BodyLister that gives its bodies in the
// order it holds them; those of Index 7 wait in a delayed exchange.
type listedBodies []queue.Body

func (l listedBodies) EachBody(fn func(queue.Body, bool)) {
	for _, b := range l {
		fn(b, b.Index == 7)
	}
}
func (l listedBodies) BodyCount() int { return len(l) }

// The live list of a snapshot is in log order and names each body once,
// however the state gave them: a message routed to two queues names its
// body twice, and queues interleave in the log. The same walk counts the
// bytes of the delayed ones.
func TestLiveBodies_InLogOrderOnce(t *testing.T) {
	got, delayed := liveBodies(listedBodies{{Index: 9, Pos: 0, Size: 10}, {Index: 7, Pos: 2, Size: 5}, {Index: 4, Pos: 1, Size: 20},
		{Index: 9, Pos: 0, Size: 10}, {Index: 7, Pos: 0, Size: 7}, {Index: 4, Pos: 0, Size: 30}})
	want := []bodies.Live{
		{Index: 4, Pos: 0, Size: 30},
		{Index: 4, Pos: 1, Size: 20},
		{Index: 7, Pos: 0, Size: 7},
		{Index: 7, Pos: 2, Size: 5},
		{Index: 9, Pos: 0, Size: 10},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("live bodies %v, want %v", got, want)
	}
	if delayed != 12 {
		t.Fatalf("delayed bodies %d bytes, want 12", delayed)
	}
}
