package group

import (
	"context"
	"errors"
	"strconv"

	"github.com/hashicorp/raft"
)

// SnapshotAfterReplay snapshots once the group has applied the log it
// started with, if that log holds at least raft's entry threshold after
// the last snapshot. Raft checks its threshold only once per
// SnapshotInterval (30-60 s) of a process's life: a node killed again
// and again sooner than that never snapshots by entries, so every
// restart replays the whole log since the last snapshot, longer each
// time. (The bytes it replays count toward the byte budget as they are
// applied: FSM.ReplayUpTo.) The replay holds the
// node's barrier when it wins an election, and after a whole-cluster
// restart nothing expires until it is done: in the crash loop (a node
// killed every few seconds, 230 entries a second) no node snapshotted in
// 29,000 entries and a restarted leader's barrier took 0.85 s at the end.
// The replay has already paid for reading the tail; the snapshot keeps
// the next restart from reading it again. It returns when done or when
// closing is closed.
func (g *Group) SnapshotAfterReplay(closing <-chan struct{}) {
	r := g.Raft()
	if r == nil {
		return
	}
	last, snap := logAndSnapshotIndex(r)
	if last <= snap || last-snap < r.ReloadableConfig().SnapshotThreshold {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := g.applied.Wait(ctx, closing, last); err != nil {
		return
	}
	// The threshold follows the messages the state now holds
	// (snapthreshold.go), as reclaimLoop would set it a SnapshotInterval
	// after the start: a large backlog is not snapshotted for a few
	// thousand entries. Raft may have snapshotted meanwhile.
	g.scaleSnapshotThreshold(g.heldMessages())
	if _, snap = logAndSnapshotIndex(r); snap >= last || last-snap < r.ReloadableConfig().SnapshotThreshold {
		return
	}
	err := Await(ctx, closing, r.Snapshot())
	switch {
	case err == nil:
		g.cfg.Logger.Info("snapshot after the restart's replay", "replayed_entries", last-snap)
	case errors.Is(err, raft.ErrNothingNewToSnapshot), errors.Is(err, ErrClosed):
	default:
		g.cfg.Logger.Warn("snapshot after the restart's replay", "err", err)
	}
}

// logAndSnapshotIndex is raft's last log index and last snapshot index.
func logAndSnapshotIndex(r *raft.Raft) (last, snap uint64) {
	m := r.Stats()
	last, _ = strconv.ParseUint(m["last_log_index"], 10, 64)
	snap, _ = strconv.ParseUint(m["last_snapshot_index"], 10, 64)
	return last, snap
}
