package group

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// heldRemovals is a segment filer whose removals wait for release.
type heldRemovals struct {
	types.SegmentFiler
	dir     string
	release chan struct{}
	crash   bool // the removal never happens
	mu      sync.Mutex
	removed []uint64 // the segment ids removed
	sizes   []int64  // their sizes when the unlink came
}

func (h *heldRemovals) Delete(base, id uint64) error {
	<-h.release
	if h.crash {
		return nil
	}
	info, err := os.Stat(filepath.Join(h.dir, segment.FileName(types.SegmentInfo{BaseIndex: base, ID: id})))
	if err != nil {
		return err
	}
	err = h.SegmentFiler.Delete(base, id)
	h.mu.Lock()
	h.removed = append(h.removed, id)
	h.sizes = append(h.sizes, info.Size())
	h.mu.Unlock()
	return err
}

// appendMiB appends n entries of 1 MiB after index from, ten per append.
func appendMiB(t testing.TB, s logStore, from uint64, n int) {
	t.Helper()
	data := make([]byte, 1<<20)
	for i := 0; i < n; i += 10 {
		var logs []*raft.Log
		for j := i; j < min(i+10, n); j++ {
			logs = append(logs, &raft.Log{Index: from + uint64(j), Term: 1, Type: raft.LogCommand, Data: data})
		}
		if err := s.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
	}
}

// awaitOrFail fails the test when do has not returned in a minute: with
// the removal held, only a truncation that waits for it would take that
// long.
func awaitOrFail(t *testing.T, what string, do func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- do() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("%s waited for the removal of the truncated segment", what)
	}
}

// openHeld opens a write-ahead log in dir whose segment removals wait for
// the release of the heldRemovals returned.
func openHeld(t *testing.T, dir string, crash bool) (logStore, *heldRemovals) {
	t.Helper()
	s, _, err := openLogStore(dir, LogStoreWAL, inlineMax, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := s.(*largeEntries).logStore.(*walStore).removals
	r.recycle = nil // these tests are of the removal
	held := &heldRemovals{SegmentFiler: r.SegmentFiler, dir: r.dir, release: make(chan struct{}), crash: crash}
	r.SegmentFiler = held // before the first append: nothing reads it yet
	return s, held
}

func TestWAL_AHeadTruncationDoesNotWaitForTheRemovalOfItsSegments(t *testing.T) {
	dir := t.TempDir()
	s, held := openHeld(t, dir, false)

	// 71 MiB: the first segment (1-70, the one past 64 MiB) is sealed,
	// the second one is the tail (the append after the one that filled a
	// segment waits for its rotation).
	appendMiB(t, s, 1, 71)
	segments, _ := filepath.Glob(filepath.Join(dir, walDir, "*.wal"))
	if len(segments) < 2 {
		t.Fatalf("%d segment files, want a sealed one and the tail", len(segments))
	}

	// raft's compaction after a snapshot: the sealed segment is freed, and
	// its removal held. The truncation and the next append go through.
	awaitOrFail(t, "the head truncation", func() error { return s.DeleteRange(1, 70) })
	awaitOrFail(t, "an append after the truncation", func() error {
		return s.StoreLogs([]*raft.Log{{Index: 72, Term: 1, Type: raft.LogCommand, Data: []byte("x")}})
	})
	if first, err := s.FirstIndex(); err != nil || first != 71 {
		t.Fatalf("first index %d (%v), want 71", first, err)
	}

	// The removal is done once released, and Close waits for it.
	close(held.release)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	held.mu.Lock()
	removed, sizes := len(held.removed), held.sizes
	held.mu.Unlock()
	if removed == 0 {
		t.Fatal("Close returned before the truncated segment was removed")
	}
	// Shrunk before the unlink: an unlink of the whole file is one
	// journal handle every fsync of the log would wait for.
	for _, n := range sizes {
		if n != 0 {
			t.Fatalf("a segment of %d bytes was unlinked: want it shrunk to nothing first", n)
		}
	}
	after, _ := filepath.Glob(filepath.Join(dir, walDir, "*.wal"))
	if len(after) != len(segments)-removed {
		t.Fatalf("%d segment files after the removal of %d, had %d", len(after), removed, len(segments))
	}
}

func TestWAL_ASegmentLeftByACrashBeforeItsRemovalIsRemovedAtOpen(t *testing.T) {
	dir := t.TempDir()
	s, never := openHeld(t, dir, true)
	appendMiB(t, s, 1, 71)
	before, _ := filepath.Glob(filepath.Join(dir, walDir, "*.wal"))
	if err := s.DeleteRange(1, 70); err != nil {
		t.Fatal(err)
	}
	// A crash: the removal never happens.
	close(never.release)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := filepath.Glob(filepath.Join(dir, walDir, "*.wal")); len(got) != len(before) {
		t.Fatalf("%d segment files, had %d: the crash removed one", len(got), len(before))
	}

	s, _, err := openLogStore(dir, LogStoreWAL, inlineMax, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // waits for the removals of the open
		t.Fatal(err)
	}
	after, _ := filepath.Glob(filepath.Join(dir, walDir, "*.wal"))
	if len(after) != len(before)-1 {
		t.Fatalf("%d segment files after reopening, had %d with one freed", len(after), len(before))
	}
}
