//go:build linux

package group

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/types"

	"github.com/raftmq/raftmq/internal/procstat"
)

// BenchmarkSegmentAppendSync is one append of 48 KiB (a batch of about
// 45 publishes of 1 KiB) and its sync into a new segment file: one that
// raft-wal created (fallocated) and one recycled from a freed segment
// (writtenSegments). cpu-us/op is the process's CPU, the kernel's
// included, per append.
func BenchmarkSegmentAppendSync(b *testing.B) {
	const size = 64 << 20
	chunk := bytes.Repeat([]byte{7}, 48<<10)
	open := map[string]func(b *testing.B, dir string, w *writtenSegments) types.WritableFile{
		"created": func(b *testing.B, dir string, w *writtenSegments) types.WritableFile {
			f, err := w.Create(dir, "00000000000000000001-0000000000000001.wal", size)
			if err != nil {
				b.Fatal(err)
			}
			return f
		},
		"recycled": func(b *testing.B, dir string, w *writtenSegments) types.WritableFile {
			// A segment written and freed, as raft's compaction leaves one.
			old := filepath.Join(dir, "00000000000000000001-0000000000000000.wal")
			if err := os.WriteFile(old, bytes.Repeat([]byte{1}, size), 0o644); err != nil {
				b.Fatal(err)
			}
			if !w.recycle(old) {
				b.Fatal("the freed segment was not recycled")
			}
			f, err := w.Create(dir, "00000000000000000001-0000000000000001.wal", size)
			if err != nil || w.used.Load() != 1 {
				b.Fatalf("the spare was not used (%v)", err)
			}
			return f
		},
	}
	for _, name := range []string{"created", "recycled"} {
		b.Run(name, func(b *testing.B) {
			var cpu time.Duration
			for done := 0; done < b.N; {
				b.StopTimer()
				dir := b.TempDir()
				w := newWrittenSegments(walfs.New(), dir, size, discardLogger())
				w.pause = 0
				f := open[name](b, dir, w)
				b.StartTimer()
				before := procstat.CPU()
				for off := 0; off+len(chunk) <= size && done < b.N; off, done = off+len(chunk), done+1 {
					if _, err := f.WriteAt(chunk, int64(off)); err != nil {
						b.Fatal(err)
					}
					if err := f.Sync(); err != nil {
						b.Fatal(err)
					}
				}
				cpu += procstat.CPU() - before
				b.StopTimer()
				_ = f.(interface{ Close() error }).Close()
				w.close()
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/op")
		})
	}
}
