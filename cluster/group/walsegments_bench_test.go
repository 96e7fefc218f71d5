package group

import (
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftwal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// BenchmarkHeadTruncation is what appends see while raft's log compaction
// frees one 64 MiB segment of the write-ahead log: a goroutine appends 1
// KiB entries back to back (each fsynced) from the truncation until the
// segment file is gone, and the longest of those appends is recorded.
// The segment is removed under the log's lock (as raft-wal does), by
// one unlink after the truncation, or shrunk step by step and then
// unlinked (laterRemovals); truncation=none is the appends alone for
// 100 ms, the disk's own tail. ns/op is the truncation's own time;
// append_max_ms the median of each iteration's longest append, and
// append_worst_ms the longest of all.
func BenchmarkHeadTruncation(b *testing.B) {
	for _, c := range []struct {
		name  string
		later bool
		step  int64
	}{
		{"truncation=none", false, -1},
		{"removal=inline", false, 0},
		{"removal=unlink-later", true, 0},
		{"removal=shrink-later", true, removalStep},
	} {
		b.Run(c.name, func(b *testing.B) {
			dir := b.TempDir()
			var filer types.SegmentFiler = segment.NewFiler(dir, walfs.New())
			var later *laterRemovals
			if c.later {
				later = newLaterRemovals(filer, dir, slog.Default())
				later.step = c.step
				filer = later
			}
			w, err := raftwal.Open(dir, raftwal.WithMetaStore(&metadb.BoltMetaDB{}), raftwal.WithSegmentFiler(filer))
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = w.Close(); later.close() }()
			big, small := make([]byte, 1<<20), make([]byte, 1<<10)
			next := uint64(1)
			store := func(data []byte) {
				if err := w.StoreLogs([]*raft.Log{{Index: next, Term: 1, Type: raft.LogCommand, Data: data}}); err != nil {
					b.Error(err)
				}
				next++
			}
			var worst []time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				// Fill a segment past 64 MiB; the append after it waits
				// for the rotation.
				for range 65 {
					store(big)
				}
				store(small)
				first, err := w.FirstIndex()
				if err != nil {
					b.Fatal(err)
				}
				last := next - 2
				var stop atomic.Bool
				longest := make(chan time.Duration)
				go func() {
					var m time.Duration
					for !stop.Load() {
						t := time.Now()
						store(small)
						m = max(m, time.Since(t))
					}
					longest <- m
				}()
				b.StartTimer()
				if c.step < 0 {
					// The baseline: appends alone, for as long as a
					// removal takes.
					time.Sleep(100 * time.Millisecond)
				} else if err := w.DeleteRange(first, last); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				later.wait()
				stop.Store(true)
				worst = append(worst, <-longest)
				b.StartTimer()
			}
			b.StopTimer()
			slices.Sort(worst)
			b.ReportMetric(float64(worst[len(worst)/2].Microseconds())/1000, "append_max_ms")
			b.ReportMetric(float64(worst[len(worst)-1].Microseconds())/1000, "append_worst_ms")
		})
	}
}
