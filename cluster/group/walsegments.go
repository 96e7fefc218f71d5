package group

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// laterRemovals is the write-ahead log's segment filer with the removal
// of segment files moved out of the log's write lock, and spread out.
//
// raft-wal removes the segments a head truncation frees (raft's log
// compaction after each snapshot) while it still holds the lock every
// append takes: the unlink of a 64 MiB segment and the directory fsync
// that follows took 30-50 ms on a busy disk, and every node compacts
// within a second of the others, so each snapshot held every append of
// the cluster, and with them every commit, for that long. Here a removal
// is queued and done by a goroutine of its own; the truncation returns
// once raft-wal has committed its metadata, which no longer names the
// segments. A removal a crash interrupts is finished at the next open:
// raft-wal deletes the segment files its metadata does not name.
//
// Out of the lock is not enough on ext4: the unlink frees the whole file
// in one journal handle, and every fsync of the log meanwhile waits for
// the journal commit that holds it, so the appends stalled about as long
// as before, in fsync instead of on the lock (traced: 43-64 ms fsyncs
// beside 60-100 ms unlinks). So a file is first shrunk a step at a time,
// each truncation a small handle an fsync waits for briefly, and only the
// empty file is unlinked.
type laterRemovals struct {
	types.SegmentFiler
	dir string
	log *slog.Logger
	// step is how much of a file each truncation frees, and pause the
	// wait after each (step 0: unlinked whole).
	step  int64
	pause time.Duration
	// recycle, when set, may take a freed file instead of its removal
	// (writtenSegments.recycle).
	recycle func(path string) bool

	mu      sync.Mutex
	queue   []segmentID
	running bool
	closed  bool
	idle    *sync.Cond // signalled when the queue empties
}

type segmentID struct{ base, id uint64 }

// Removal steps: a 64 MiB segment goes in 64 truncations over about 64
// ms, each freeing 256 blocks of 4 KiB.
const (
	removalStep  = 1 << 20
	removalPause = time.Millisecond
)

func newLaterRemovals(f types.SegmentFiler, dir string, log *slog.Logger) *laterRemovals {
	r := &laterRemovals{SegmentFiler: f, dir: dir, log: log, step: removalStep, pause: removalPause}
	r.idle = sync.NewCond(&r.mu)
	return r
}

// Delete queues the removal of a segment file the log's metadata no longer
// names, and returns. After close it removes the file itself.
func (r *laterRemovals) Delete(base, id uint64) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return r.SegmentFiler.Delete(base, id)
	}
	r.queue = append(r.queue, segmentID{base, id})
	if !r.running {
		r.running = true
		go r.run()
	}
	r.mu.Unlock()
	return nil
}

// run removes the queued files until the queue is empty.
func (r *laterRemovals) run() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.queue) > 0 {
		s := r.queue[0]
		r.queue = r.queue[1:]
		r.mu.Unlock()
		path := filepath.Join(r.dir, segment.FileName(types.SegmentInfo{BaseIndex: s.base, ID: s.id}))
		if r.recycle != nil && r.recycle(path) {
			r.mu.Lock()
			continue
		}
		r.shrink(path)
		if err := r.SegmentFiler.Delete(s.base, s.id); err != nil && !errors.Is(err, fs.ErrNotExist) {
			// Not fatal: the file takes disk space until the next open
			// removes it.
			r.log.Error("write-ahead log: cannot remove a truncated segment", "base_index", s.base, "segment", s.id, "err", err)
		}
		r.mu.Lock()
	}
	r.running = false
	r.idle.Broadcast()
}

// shrink truncates the file at path to nothing, step by step. It is
// unreferenced, so nothing reads it; on any error the unlink that follows
// frees what is left.
func (r *laterRemovals) shrink(path string) { shrinkFile(path, r.step, r.pause) }

// shrinkFile truncates the file at path to nothing, step bytes at a time
// with pause after each (step 0: not at all), so that no truncation
// frees more blocks in one journal handle than an fsync of the log
// should wait for.
func shrinkFile(path string, step int64, pause time.Duration) {
	shrinkFileUntil(path, step, pause, nil)
}

// shrinkFileUntil is shrinkFile, stopping when stop closes (nil: never).
// The descriptor holds the file: unlinked by someone else meanwhile, its
// blocks are still freed by the steps, not at once.
func shrinkFileUntil(path string, step int64, pause time.Duration, stop <-chan struct{}) {
	if step <= 0 {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return
	}
	for size := info.Size(); size > 0; {
		size = max(size-step, 0)
		if f.Truncate(size) != nil {
			return
		}
		select {
		case <-stop:
			return
		case <-time.After(pause):
		}
	}
}

// wait waits until no removal is queued or under way (nil: nothing to
// wait for).
func (r *laterRemovals) wait() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.running {
		r.idle.Wait()
	}
}

// close waits for the queued removals; later ones are done at once. A
// log opened without it (nil) has nothing to wait for.
func (r *laterRemovals) close() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.wait()
}
