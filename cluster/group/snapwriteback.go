package group

import (
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
)

// A snapshot of a long queue is hundreds of megabytes, and raft's file
// store syncs it once, when it is complete. Traced behind 5,000,000
// queued messages (docs/performance.md, "What holds the paced queue
// behind 5,000,000"), that sync held 250-365 ms on every node, and the
// log's own syncs on the same file system waited behind it: a paced
// queue's deliveries stalled for as long. So the file is handed to the
// kernel's writeback as it is written, a piece at a time (writeBack).
//
// Handing it over is not enough when the snapshot is written faster than
// the disk takes it: a 250 MB snapshot is encoded in about two seconds,
// and what was handed over queues in the device ahead of the log's next
// sync. Behind 5,000,000 queued messages on a machine whose disk writes
// about 200 MB a second, a paced queue's commits still stalled 200 ms at
// the end of each node's snapshot, the second in which 110 MB went out.
// So before it hands over a piece, the writer waits until the piece it
// handed over last is on disk (writeBackWait): at most one piece of the
// snapshot is queued in the device ahead of a sync of the log, and the
// snapshot is written at the pace the disk takes it. Nothing about
// durability changes: raft still syncs the file before it counts.

// writeBackEvery is how much of a snapshot is written between two
// writeback hints: what a sync of the log may find queued ahead of it,
// 20 ms of a disk that writes 200 MB a second.
const writeBackEvery = 4 << 20

// Create is raft's, with the new snapshot's file written back as it grows.
func (s *SnapshotStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil || s.dir == "" {
		return sink, err
	}
	// raft's file store writes a snapshot to state.bin in a directory
	// named after it with a .tmp suffix until it is complete. The sink
	// writes through a buffer, so a second descriptor of the file sees
	// the same pages: the writeback needs nothing of the sink's own.
	// Without it (another store's layout) the snapshot is synced as raft
	// does.
	f, _ := os.Open(filepath.Join(s.dir, sink.ID()+".tmp", "state.bin"))
	return &writeBackSink{SnapshotSink: sink, file: f, store: s}, nil
}

// writeBackSink is a snapshot sink whose file is handed to writeback
// every writeBackEvery bytes, and whose completion has the snapshots it
// pushed out of raft's view shrunk (SnapshotStore.reap).
type writeBackSink struct {
	raft.SnapshotSink
	file    *os.File // nil: no writeback
	store   *SnapshotStore
	written int64 // bytes the sink took
	hinted  int64 // bytes handed to writeback
	waited  int64 // bytes known written back
	hints   int   // writeback hints given (tests)
}

func (w *writeBackSink) Write(p []byte) (int, error) {
	n, err := w.SnapshotSink.Write(p)
	w.written += int64(n)
	if w.file != nil && w.written-w.hinted >= writeBackEvery {
		// What the sink's buffer still holds is written back by the
		// next hint, or by raft's sync. The piece handed over last
		// time is on disk before this one is handed over.
		writeBackWait(w.file, w.waited, w.hinted-w.waited)
		w.waited = w.hinted
		writeBack(w.file, w.hinted, w.written-w.hinted)
		w.hinted = w.written
		w.hints++
	}
	return n, err
}

func (w *writeBackSink) Close() error {
	err := w.SnapshotSink.Close()
	w.closeFile()
	if err == nil {
		w.store.reap()
	}
	return err
}

func (w *writeBackSink) Cancel() error {
	err := w.SnapshotSink.Cancel()
	w.closeFile()
	return err
}

func (w *writeBackSink) closeFile() {
	if w.file != nil {
		w.file.Close()
	}
}
