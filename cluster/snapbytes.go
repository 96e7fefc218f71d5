package cluster

import (
	"context"
	"errors"

	"github.com/hashicorp/raft"
)

// snapshotBytesLoop snapshots when the meter says the log grew by its
// budget. Each attempt starts a new count whatever its outcome, and any
// snapshot raft takes itself (by entry count, or the body reclaimer's)
// does too, so there is at most one attempt per budget of appended bytes:
// a snapshot that cannot compact the log (its bodies pinned, or the
// trailing entries kept) is still taken only once per budget, and still
// bounds a restart, which reads only the entries after it.
func (n *Node) snapshotBytesLoop() {
	defer n.wg.Done()
	m := n.group.Storage().Meter()
	for {
		select {
		case <-m.Due():
		case <-n.closing:
			return
		}
		if m.Pending() < m.Budget() || n.Err() != nil {
			continue
		}
		pending := m.Pending()
		m.Reset()
		err := n.await(context.Background(), n.group.Raft().Snapshot())
		switch {
		case err == nil:
			n.log.Info("snapshot by log size", "appended_bytes", pending)
		case errors.Is(err, raft.ErrNothingNewToSnapshot):
		default:
			n.log.Warn("snapshot by log size", "appended_bytes", pending, "err", err)
		}
	}
}
