package group

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft-wal/types"
)

// writtenSegments is raft-wal's file system with the segment files that
// raft's compaction frees used again for the segments the log creates
// next, instead of new ones.
//
// raft-wal creates each segment with fallocate, so the first write of
// every page of the log is to a page the kernel has just made (and on
// ext4 or xfs into an unwritten extent, whose conversion goes through
// the journal at the next sync). Profiles of a one-publisher run had
// raft-wal's pwrite at about a quarter of each node's CPU, about 4.5 us
// a KiB, against about 0.4 us a KiB into a file whose pages are in the
// page cache and whose blocks are written (BenchmarkSegmentAppendSync:
// an append of 48 KiB and its sync, about a third less time and a
// quarter less CPU). A freed segment is such a file, so instead of
// being removed it is overwritten with zeros
// (raft-wal reads a segment up to the first zeros: an old frame left
// behind the new ones would be read as the new segment's), synced, and
// renamed to the next segment's name when raft-wal creates it. Its size
// is then fixed and its blocks written, so an append changes no metadata
// that reading it back needs, and such a file is synced with fdatasync.
//
// A spare is written under names raft-wal does not list (no .wal
// suffix), and renamed to the segment's name when raft-wal creates the
// segment; the segment's first sync also syncs the directory, as
// raft-wal's own files do, so its name is durable before anything in it
// counts as committed. A file gets a spare's name (spareName) only once
// all of it is zeros on disk, so a spare found at open is whole and is
// used; one cut short by a crash (spareTmpName) is removed at open. When
// no spare is ready, a segment is created as raft-wal creates it. There
// are at most maxSpares: a segment freed while they are ready is removed
// as before (laterRemovals). A spare unused for spareKeep is removed, so
// that a log gone idle gives its disk back.
//
// The zeros are written in steps with a sync and a pause between, so that
// the disk takes them beside the log's own syncs rather than in one
// flush that would make those wait.
type writtenSegments struct {
	types.VFS
	dir string
	log *slog.Logger

	step  int           // bytes written between two syncs
	pause time.Duration // wait after each step
	keep  time.Duration // how long a spare waits to be used (spareKeep)

	mu        sync.Mutex
	size      uint64                // a segment's size, as raft-wal is told (walSegmentSize)
	spares    map[string]*spareFile // the ready spares by name
	preparing bool
	closed    bool
	idle      *sync.Cond // signalled when a preparation ends

	used atomic.Uint64 // segments created from a spare (tests)
}

const (
	spareTmpName = "next-segment.spare.tmp"
	// maxSpares is how many freed segments are kept for the next ones: a
	// compaction frees about two at once (128 MiB of log between
	// snapshots).
	maxSpares = 2

	// spareStep and sparePause write a 64 MiB spare in 64 steps over
	// about 2.5 s: the disk takes one segment's bytes a second time, and
	// the log's syncs should queue behind as little of them as they can.
	// A log that rotates faster than that (one segment in 2.5 s is 26 MB
	// a second) creates the odd segment itself.
	spareStep  = 1 << 20
	sparePause = 40 * time.Millisecond
)

// spareKeep is how long a spare waits for the log to need it before it
// is removed: a log that rotates does so within seconds at any rate that
// makes the spares worth having, and one gone idle (a queue group whose
// queues went quiet) should not hold their disk.
const spareKeep = 5 * time.Minute

// spareFile is a ready spare.
type spareFile struct {
	size  uint64
	timer *time.Timer // its removal once unused for keep
}

// zeros is what a spare is written with.
var zeros = make([]byte, 1<<20)

// newWrittenSegments wraps vfs for the log in dir, whose segments are
// segmentSize bytes. A spare left whole by an earlier run is kept; one cut
// short is removed.
//
// The size is given rather than learnt from the first Create: a restarted
// log reopens its tail segment and creates none until it rotates, and the
// segments its first compactions free are to be reused all the same.
func newWrittenSegments(vfs types.VFS, dir string, segmentSize uint64, log *slog.Logger) *writtenSegments {
	return newWrittenSegmentsKept(vfs, dir, segmentSize, log, spareKeep)
}

// newWrittenSegmentsKept is newWrittenSegments with spares kept for keep.
func newWrittenSegmentsKept(vfs types.VFS, dir string, segmentSize uint64, log *slog.Logger, keep time.Duration) *writtenSegments {
	w := &writtenSegments{VFS: vfs, dir: dir, log: log, size: segmentSize, step: spareStep, pause: sparePause, keep: keep, spares: map[string]*spareFile{}}
	w.idle = sync.NewCond(&w.mu)
	_ = os.Remove(filepath.Join(dir, spareTmpName))
	w.mu.Lock()
	for i := range maxSpares {
		name := spareName(i)
		if st, err := os.Stat(filepath.Join(dir, name)); err == nil && st.Mode().IsRegular() && st.Size() > 0 {
			w.addSpare(name, uint64(st.Size()))
		}
	}
	w.mu.Unlock()
	return w
}

// addSpare records the spare name, ready, and arms its removal. Under mu.
func (w *writtenSegments) addSpare(name string, size uint64) {
	sp := &spareFile{size: size}
	sp.timer = time.AfterFunc(w.keep, func() { w.expire(name, sp) })
	w.spares[name] = sp
}

// takeSpareLocked forgets the spare name, taken or removed. Under mu.
func (w *writtenSegments) takeSpareLocked(name string) {
	if sp := w.spares[name]; sp != nil {
		sp.timer.Stop()
		delete(w.spares, name)
	}
}

// expire removes the spare sp, still unused after keep: shrunk a step at
// a time, as laterRemovals removes a segment, then unlinked.
func (w *writtenSegments) expire(name string, sp *spareFile) {
	w.mu.Lock()
	if w.closed || w.spares[name] != sp {
		w.mu.Unlock()
		return
	}
	if w.preparing {
		// A spare being made holds the one goroutine that writes or
		// removes them; this one's turn comes after.
		sp.timer.Reset(time.Second)
		w.mu.Unlock()
		return
	}
	delete(w.spares, name)
	w.preparing = true
	w.mu.Unlock()
	path := filepath.Join(w.dir, name)
	shrinkFile(path, removalStep, removalPause)
	_ = os.Remove(path)
	w.mu.Lock()
	w.preparing = false
	w.idle.Broadcast()
	w.mu.Unlock()
}

// spareName is the name of the i-th spare.
func spareName(i int) string { return fmt.Sprintf("next-segment.%d.spare", i+1) }

// Create creates the segment file name of size bytes: the spare renamed,
// when one of that size is ready, else raft-wal's own way.
func (w *writtenSegments) Create(dir, name string, size uint64) (types.WritableFile, error) {
	if f := w.takeSpare(dir, name, size); f != nil {
		return f, nil
	}
	return w.VFS.Create(dir, name, size)
}

// takeSpare renames a ready spare of size to name and opens it; nil when
// there is none or it cannot be used.
func (w *writtenSegments) takeSpare(dir, name string, size uint64) types.WritableFile {
	if dir != w.dir || size == 0 {
		return nil
	}
	path := filepath.Join(dir, name)
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		// Create must fail on a file that exists, as raft-wal's does.
		return nil
	}
	w.mu.Lock()
	var spare string
	for n, sp := range w.spares {
		switch {
		case sp.size != size:
			// Left by a run with another segment size: of no use.
			_ = os.Remove(filepath.Join(dir, n))
			w.takeSpareLocked(n)
		case spare == "" && !w.closed:
			spare = n
			w.takeSpareLocked(n)
		}
	}
	w.mu.Unlock()
	if spare == "" {
		return nil
	}
	spare = filepath.Join(dir, spare)
	if err := os.Rename(spare, path); err != nil {
		w.log.Warn("write-ahead log: cannot use the spare segment file", "err", err)
		_ = os.Remove(spare)
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		// The renamed file is a segment of zeros raft-wal was not told
		// of: its next open removes it. Creating the usual way now fails
		// on the name, as any Create of an existing file must.
		w.log.Warn("write-ahead log: cannot open the spare segment file", "err", err)
		return nil
	}
	w.used.Add(1)
	return &writtenFile{File: f, dir: dir}
}

// recycle makes the freed segment file at path a spare, and reports
// whether it took the file (the name is gone then, spare or not). It
// declines when maxSpares are ready or one is being made, or when the file
// is smaller than a segment (writing its missing blocks would be the cost it saves).
func (w *writtenSegments) recycle(path string) bool {
	w.mu.Lock()
	size, name := w.size, ""
	for i := range maxSpares {
		if _, ok := w.spares[spareName(i)]; !ok {
			name = spareName(i)
			break
		}
	}
	ok := !w.closed && !w.preparing && name != "" && size > 0
	if ok {
		w.preparing = true
	}
	w.mu.Unlock()
	if !ok {
		return false
	}
	took, err := w.zero(path, name, size)
	w.mu.Lock()
	w.preparing = false
	if err == nil {
		w.addSpare(name, size)
	}
	w.idle.Broadcast()
	w.mu.Unlock()
	if err != nil && !errors.Is(err, errSpareClosed) && !errors.Is(err, errSpareSmall) {
		w.log.Warn("write-ahead log: cannot make a freed segment the next one; it is removed, and the next segment created", "path", path, "err", err)
	}
	return took
}

var (
	errSpareClosed = errors.New("log closed")
	errSpareSmall  = errors.New("smaller than a segment")
)

// zero renames the file at path to spareTmpName, cuts it to size and
// overwrites it with zeros, syncs it and names it name. took says whether
// path was renamed: on an error after that, the file is removed.
func (w *writtenSegments) zero(path, name string, size uint64) (took bool, _ error) {
	st, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	if uint64(st.Size()) < size {
		return false, errSpareSmall
	}
	tmp := filepath.Join(w.dir, spareTmpName)
	if err := os.Rename(path, tmp); err != nil {
		return false, err
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY, 0)
	if err != nil {
		_ = os.Remove(tmp)
		return true, err
	}
	fail := func(err error) (bool, error) {
		_ = f.Close()
		_ = os.Remove(tmp)
		return true, err
	}
	// The part past size is the last append and the index: a few KiB.
	if uint64(st.Size()) > size {
		if err := f.Truncate(int64(size)); err != nil {
			return fail(err)
		}
	}
	var since int
	for off := uint64(0); off < size; {
		n := min(uint64(len(zeros)), size-off)
		if _, err := f.WriteAt(zeros[:n], int64(off)); err != nil {
			return fail(err)
		}
		off += n
		if since += int(n); since < w.step && off < size {
			continue
		}
		since = 0
		if err := datasync(f); err != nil {
			return fail(err)
		}
		w.mu.Lock()
		closed := w.closed
		w.mu.Unlock()
		if closed {
			return fail(errSpareClosed)
		}
		if off < size && w.pause > 0 {
			time.Sleep(w.pause)
		}
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(tmp)
		return true, err
	}
	if err := os.Rename(tmp, filepath.Join(w.dir, name)); err != nil {
		_ = os.Remove(tmp)
		return true, fmt.Errorf("name the spare: %w", err)
	}
	return true, nil
}

// close stops a spare being written and waits for it; a ready spare stays
// for the next open.
func (w *writtenSegments) close() {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.closed = true
	for _, sp := range w.spares {
		sp.timer.Stop()
	}
	for w.preparing {
		w.idle.Wait()
	}
	w.mu.Unlock()
}

// writtenFile is a segment made from a spare: every block written, its
// size fixed, so a sync is fdatasync. Its first sync also syncs the
// directory, which holds its new name.
type writtenFile struct {
	*os.File
	dir    string
	synced atomic.Bool
}

func (f *writtenFile) Sync() error {
	if err := datasync(f.File); err != nil {
		return err
	}
	if !f.synced.Swap(true) {
		return syncDir(f.dir)
	}
	return nil
}
