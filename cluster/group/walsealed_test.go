package group

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"
	raftwal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
)

// openSealedWAL opens a write-ahead log in dir with segments of size
// bytes, read from their files once sealed.
func openSealedWAL(t testing.TB, dir string, size int) *raftwal.WAL {
	t.Helper()
	filer := sealedReaders{SegmentFiler: segment.NewFiler(dir, walfs.New()), log: slog.Default()}
	w, err := raftwal.Open(dir, raftwal.WithMetaStore(&metadb.BoltMetaDB{}), raftwal.WithSegmentFiler(filer), raftwal.WithSegmentSize(size))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// entryData is the data of entry index: size bytes that name it, so that
// a read of the wrong entry shows.
func entryData(index uint64, size int, gen byte) []byte {
	b := bytes.Repeat([]byte{gen}, size)
	binary.BigEndian.PutUint64(b, index)
	return b
}

// appendBatches appends entries from index from on, batch entries of size
// bytes at a time, until to (inclusive).
func appendBatches(t testing.TB, w *raftwal.WAL, from, to uint64, batch, size int, gen byte) {
	t.Helper()
	for i := from; i <= to; {
		var logs []*raft.Log
		for ; i <= to && len(logs) < batch; i++ {
			logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: entryData(i, size, gen)})
		}
		if err := w.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
	}
}

func checkEntries(t testing.TB, w *raftwal.WAL, from, to uint64, size int, gen func(uint64) byte) {
	t.Helper()
	var l raft.Log
	for i := from; i <= to; i++ {
		if err := w.GetLog(i, &l); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if !bytes.Equal(l.Data, entryData(i, size, gen(i))) {
			t.Fatalf("entry %d: read the wrong data", i)
		}
	}
}

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// A log that keeps its segments (a backlog no one consumes) holds no
// memory for the ones sealed: raft-wal's writer of each, kept as its
// reader, held a buffer the size of the largest append it took and an
// index of 32,768 offsets, so the live heap grew by about a megabyte a
// segment here.
func TestWAL_SealedSegmentsHoldNoWriteBuffers(t *testing.T) {
	dir := t.TempDir()
	w := openSealedWAL(t, dir, 4<<20)
	defer w.Close()
	const size, batch = 8 << 10, 64 // 512 KiB appends: a 1 MiB buffer each
	appendBatches(t, w, 1, 1024, batch, size, 1)
	before := liveHeap()
	// 32 more segments.
	appendBatches(t, w, 1025, 1024+32*512, batch, size, 1)
	grew := int64(liveHeap()) - int64(before)
	runtime.KeepAlive(w)
	// Kept writers hold 36 MiB here.
	t.Logf("the live heap grew by %d KiB", grew>>10)
	if grew > 6<<20 {
		t.Fatalf("the live heap grew by %d MiB over 32 sealed segments", grew>>20)
	}
	checkEntries(t, w, 1, 1024+32*512, size, func(uint64) byte { return 1 })
}

// Reads go on while segments are sealed and reopened under them, and a
// truncation of the tail (which seals the segment where it got to) and a
// restart read what was written.
func TestWAL_SealedSegmentsReadWhileTheyAreReopened(t *testing.T) {
	dir := t.TempDir()
	w := openSealedWAL(t, dir, 1<<20)
	const size, batch, last = 4 << 10, 16, 4096
	var written atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var l raft.Log
			for i := uint64(1); ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				n := written.Load()
				if n == 0 {
					continue
				}
				idx := 1 + (i*7919)%n
				if err := w.GetLog(idx, &l); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(l.Data, entryData(idx, size, 1)) {
					errs <- raft.ErrLogNotFound
					return
				}
			}
		}()
	}
	for i := uint64(1); i <= last; i += batch {
		appendBatches(t, w, i, i+batch-1, batch, size, 1)
		written.Store(i + batch - 1)
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("a read while segments were sealed: %v", err)
	default:
	}

	// The tail from 4000 on goes; other data takes its indexes.
	if err := w.DeleteRange(4000, last); err != nil {
		t.Fatal(err)
	}
	appendBatches(t, w, 4000, last+100, batch, size, 2)
	gen := func(i uint64) byte {
		if i >= 4000 {
			return 2
		}
		return 1
	}
	checkEntries(t, w, 1, last+100, size, gen)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w = openSealedWAL(t, dir, 1<<20)
	defer w.Close()
	checkEntries(t, w, 1, last+100, size, gen)
	appendBatches(t, w, last+101, last+2000, batch, size, 2)
	checkEntries(t, w, 1, last+2000, size, gen)
}
