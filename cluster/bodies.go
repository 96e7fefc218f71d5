package cluster

import (
	"errors"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/fsm"
)

// Message bodies stay out of the state machine and live in the group's
// log and body files (group/snapframe.go says how). The node's part is
// to reclaim them when a quiet cluster would keep them.

// reclaimLoop snapshots once most of the bodies the last snapshot named
// are gone. Bodies are reclaimed (log compacted, body files deleted) only
// when a snapshot no longer names them, and raft snapshots by entry
// count: a drained backlog on a cluster that then goes quiet would keep
// its disk for as long as nothing else is written.
func (n *Node) reclaimLoop() {
	defer n.wg.Done()
	tick := time.NewTicker(n.cfg.SnapshotInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if n.Err() != nil {
				continue
			}
			// Both read the same count: the state is read once a tick.
			queued := n.heldMessages()
			n.reclaimBodies(queued)
			n.scaleSnapshotThreshold(queued)
		case <-n.closing:
			return
		}
	}
}

// heldMessages is the messages the state holds: ready, unacked, delayed.
func (n *Node) heldMessages() uint64 {
	var held uint64
	n.View(func(m *fsm.Machine) {
		st := m.Stats()
		held = st.Ready + st.Unacked + st.Delayed
	})
	return held
}

// reclaimBodies snapshots once the state holds less than half the bodies
// the last snapshot named (queued: heldMessages).
func (n *Node) reclaimBodies(queued uint64) {
	named := n.group.FSM().SnapshotBodies()
	if named == 0 || int64(queued)*2 > named {
		return
	}
	if err := n.group.Raft().Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		n.log.Warn("snapshot to reclaim message bodies", "err", err)
	}
}
