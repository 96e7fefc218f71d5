package cluster

import (
	"context"
	"errors"

	"github.com/hashicorp/raft"
)

// snapshotAfterReplay snapshots once this node has applied the log it
// started with, if that log holds at least raft's entry threshold after
// the last snapshot. Raft checks its threshold only once per
// SnapshotInterval (30-60 s) of a process's life, and the byte meter
// counts only what this process appended: a node killed again and again
// sooner than that never snapshots, so every restart replays the whole
// log since the last snapshot, longer each time. The replay holds the
// node's barrier when it wins an election, and after a whole-cluster
// restart nothing expires until it is done: in the crash loop (a node
// killed every few seconds, 230 entries a second) no node snapshotted in
// 29,000 entries and a restarted leader's barrier took 0.85 s at the end.
// The replay has already paid for reading the tail; the snapshot keeps
// the next restart from reading it again.
func (n *Node) snapshotAfterReplay() {
	defer n.wg.Done()
	s := n.Stats()
	last := s.LastLogIndex
	if last <= s.LastSnapshotIndex || last-s.LastSnapshotIndex < n.raft.ReloadableConfig().SnapshotThreshold {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := n.applied.wait(ctx, n.closing, last); err != nil {
		return
	}
	// The threshold follows the messages the state now holds
	// (snapthreshold.go), as reclaimLoop would set it a SnapshotInterval
	// after the start: a large backlog is not snapshotted for a few
	// thousand entries. Raft may have snapshotted meanwhile.
	n.scaleSnapshotThreshold(n.heldMessages())
	s = n.Stats()
	if s.LastSnapshotIndex >= last || last-s.LastSnapshotIndex < n.raft.ReloadableConfig().SnapshotThreshold {
		return
	}
	err := n.await(ctx, n.raft.Snapshot())
	switch {
	case err == nil:
		n.log.Info("snapshot after the restart's replay", "replayed_entries", last-s.LastSnapshotIndex)
	case errors.Is(err, raft.ErrNothingNewToSnapshot), errors.Is(err, ErrClosed):
	default:
		n.log.Warn("snapshot after the restart's replay", "err", err)
	}
}
