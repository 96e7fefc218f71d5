package group

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	walfs "github.com/hashicorp/raft-wal/fs"
)

// filesOf is the segment files of a log store.
func filesOf(s logStore) *writtenSegments {
	return s.(*largeEntries).logStore.(*walStore).files
}

// awaitPrepared waits until no spare is being made.
func (w *writtenSegments) awaitPrepared() {
	w.mu.Lock()
	for w.preparing {
		w.idle.Wait()
	}
	w.mu.Unlock()
}

// appendNumbered appends n entries of 1 MiB after index from, each
// filled with its index's low byte.
func appendNumbered(t testing.TB, s logStore, from uint64, n int) {
	t.Helper()
	for i := 0; i < n; i += 8 {
		var logs []*raft.Log
		for j := i; j < min(i+8, n); j++ {
			idx := from + uint64(j)
			logs = append(logs, &raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(idx)}, 1<<20)})
		}
		if err := s.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
	}
}

// checkNumbered reads back entries first to last as appendNumbered wrote
// them.
func checkNumbered(t *testing.T, s logStore, first, last uint64) {
	t.Helper()
	if f, err := s.FirstIndex(); err != nil || f != first {
		t.Fatalf("first index %d (%v), want %d", f, err, first)
	}
	if l, err := s.LastIndex(); err != nil || l != last {
		t.Fatalf("last index %d (%v), want %d", l, err, last)
	}
	for idx := first; idx <= last; idx++ {
		var l raft.Log
		if err := s.GetLog(idx, &l); err != nil {
			t.Fatalf("entry %d: %v", idx, err)
		}
		if len(l.Data) != 1<<20 || len(bytes.Trim(l.Data, string([]byte{byte(idx)}))) != 0 {
			t.Fatalf("entry %d: %d bytes, not all %d", idx, len(l.Data), byte(idx))
		}
	}
}

// allZero reports whether the file at path holds only zero bytes.
func allZero(t *testing.T, path string) bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return len(bytes.Trim(b, "\x00")) == 0
}

func TestWAL_ASegmentTheCompactionFreedIsTheNextSegment(t *testing.T) {
	dir := t.TempDir()
	wal := filepath.Join(dir, walDir)
	s, _, err := openLogStore(dir, LogStoreWAL, inlineMax, nil)
	if err != nil {
		t.Fatal(err)
	}
	files := filesOf(s)
	files.pause = 0 // before the removal goroutine starts
	spare := filepath.Join(wal, spareName(0))

	// Two segments: entries 1-64 (sealed past 64 MiB) and the tail.
	appendNumbered(t, s, 1, 71)
	first, _ := filepath.Glob(filepath.Join(wal, "*.wal"))
	if len(first) != 2 {
		t.Fatalf("segment files %v, want two", first)
	}
	if _, err := os.Stat(spare); err == nil {
		t.Fatal("a spare before any segment was freed")
	}

	// The compaction frees the first: it becomes the spare, all zeros,
	// a segment's size.
	if err := s.DeleteRange(1, 64); err != nil {
		t.Fatal(err)
	}
	s.(*largeEntries).logStore.(*walStore).removals.wait()
	st, err := os.Stat(spare)
	if err != nil {
		t.Fatalf("no spare once a segment was freed: %v", err)
	}
	if st.Size() != 64<<20 || !allZero(t, spare) {
		t.Fatalf("spare of %d bytes, want 64 MiB of zeros", st.Size())
	}
	if _, err := os.Stat(first[0]); err == nil {
		t.Fatalf("the freed segment %s is still there", first[0])
	}

	// The next rotation takes it.
	appendNumbered(t, s, 72, 72)
	if n := files.used.Load(); n != 1 {
		t.Fatalf("%d segments made from a spare, want 1", n)
	}
	if _, err := os.Stat(spare); err == nil {
		t.Fatal("the spare is still there after the rotation")
	}
	checkNumbered(t, s, 65, 143)

	// What a crash would leave (each append returned once synced): a copy
	// of the files as they are opens with every entry.
	crashed := t.TempDir()
	copyDir(t, wal, filepath.Join(crashed, walDir))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, crashed} {
		s, _, err := openLogStore(d, LogStoreWAL, inlineMax, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkNumbered(t, s, 65, 143)
		appendNumbered(t, s, 144, 40)
		checkNumbered(t, s, 65, 183)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWAL_ASpareLeftWholeIsUsedAfterAStartAndOneCutShortIsRemoved(t *testing.T) {
	dir := t.TempDir()
	wal := filepath.Join(dir, walDir)
	s, _, err := openLogStore(dir, LogStoreWAL, inlineMax, nil)
	if err != nil {
		t.Fatal(err)
	}
	filesOf(s).pause = 0 // before the removal goroutine starts
	appendNumbered(t, s, 1, 71)
	if err := s.DeleteRange(1, 64); err != nil {
		t.Fatal(err)
	}
	s.(*largeEntries).logStore.(*walStore).removals.wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(wal, spareName(0))); err != nil {
		t.Fatalf("no spare left by the run before: %v", err)
	}
	// A crash while a second one was being made: garbage where zeros
	// were due.
	if err := os.WriteFile(filepath.Join(wal, spareTmpName), bytes.Repeat([]byte{0xff}, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}

	s, _, err = openLogStore(dir, LogStoreWAL, inlineMax, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(wal, spareTmpName)); err == nil {
		t.Fatal("the spare cut short is still there after the start")
	}
	appendNumbered(t, s, 72, 72)
	if n := filesOf(s).used.Load(); n != 1 {
		t.Fatalf("%d segments made from a spare after the start, want the one left", n)
	}
	checkNumbered(t, s, 65, 143)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestWAL_ARestartedLogReusesWhatItsFirstCompactionFrees(t *testing.T) {
	dir := t.TempDir()
	s, _, err := openLogStore(dir, LogStoreWAL, inlineMax, nil)
	if err != nil {
		t.Fatal(err)
	}
	appendNumbered(t, s, 1, 71)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopened, the log appends to its tail segment and creates none
	// before its first compaction frees the sealed one.
	s, _, err = openLogStore(dir, LogStoreWAL, inlineMax, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	filesOf(s).pause = 0 // before the removal goroutine starts
	if err := s.DeleteRange(1, 64); err != nil {
		t.Fatal(err)
	}
	s.(*largeEntries).logStore.(*walStore).removals.wait()
	if _, err := os.Stat(filepath.Join(dir, walDir, spareName(0))); err != nil {
		t.Fatalf("the segment freed before the restarted log's first rotation was not kept: %v", err)
	}
	appendNumbered(t, s, 72, 72)
	if n := filesOf(s).used.Load(); n != 1 {
		t.Fatalf("%d segments made from a spare, want 1", n)
	}
	checkNumbered(t, s, 65, 143)
}

func TestWAL_ASpareIsUsedOnlyForANewSegmentOfItsSize(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, spareName(0)), make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	w := newWrittenSegments(walfs.New(), dir, 1<<20, discardLogger())
	w.pause = 0
	defer w.close()
	const name = "00000000000000000001-0000000000000001.wal"
	f, err := w.Create(dir, name, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer f.(io.Closer).Close()
	if w.used.Load() != 0 {
		t.Fatal("a spare of 4 KiB was used for a segment of 1 MiB")
	}
	// A freed file smaller than a segment is not taken.
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	if w.recycle(small) {
		t.Fatal("a file of 4 KiB was taken as the spare of 1 MiB segments")
	}
	// A Create must not replace a file that exists, spare or not.
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, bytes.Repeat([]byte{1}, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if !w.recycle(big) {
		t.Fatal("a freed file of 2 MiB was not taken for 1 MiB segments")
	}
	if st, err := os.Stat(filepath.Join(dir, spareName(0))); err != nil || st.Size() != 1<<20 || !allZero(t, filepath.Join(dir, spareName(0))) {
		t.Fatalf("spare %v (%v), want 1 MiB of zeros", st, err)
	}
	if _, err := w.Create(dir, name, 1<<20); err == nil {
		t.Fatal("Create replaced an existing segment file")
	}
	if w.used.Load() != 0 {
		t.Fatal("the spare was renamed over an existing segment file")
	}
	// Up to maxSpares are kept; past them a freed file is removed.
	for i := 1; i <= maxSpares; i++ {
		if err := os.WriteFile(big, bytes.Repeat([]byte{1}, 2<<20), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, want := w.recycle(big), i < maxSpares; got != want {
			t.Fatalf("spare %d of %d taken: %v", i+1, maxSpares, got)
		}
	}
	if n := len(w.spares); n != maxSpares {
		t.Fatalf("%d spares, want %d", n, maxSpares)
	}
}

func TestWAL_ASpareUnusedForItsKeepIsRemoved(t *testing.T) {
	dir := t.TempDir()
	w := newWrittenSegmentsKept(walfs.New(), dir, 1<<20, discardLogger(), 10*time.Millisecond)
	w.pause = 0
	defer w.close()
	freed := filepath.Join(dir, "freed")
	if err := os.WriteFile(freed, bytes.Repeat([]byte{1}, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if !w.recycle(freed) {
		t.Fatal("the freed file was not taken")
	}
	w.mu.Lock()
	for len(w.spares) > 0 || w.preparing {
		w.idle.Wait()
	}
	w.mu.Unlock()
	if _, err := os.Stat(filepath.Join(dir, spareName(0))); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the spare unused past its keep is still there (%v)", err)
	}
	// A Create after it makes its segment the usual way.
	f, err := w.Create(dir, "00000000000000000001-0000000000000001.wal", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.(io.Closer).Close()
	if w.used.Load() != 0 {
		t.Fatal("a removed spare was used")
	}
}
