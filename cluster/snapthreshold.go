package cluster

import "github.com/raftmq/raftmq/cluster/group"

// scaleSnapshotThreshold sets raft's entry threshold for the messages the
// state holds now (heldMessages), when the configuration left it at its
// default.
func (n *Node) scaleSnapshotThreshold(held uint64) {
	if !n.cfg.scaleSnapshotThreshold {
		return
	}
	want := group.SnapshotThreshold(n.cfg.SnapshotThreshold, held)
	rc := n.group.Raft().ReloadableConfig()
	if rc.SnapshotThreshold == want {
		return
	}
	rc.SnapshotThreshold = want
	if err := n.group.Raft().ReloadConfig(rc); err != nil {
		n.log.Warn("snapshot threshold", "entries", want, "err", err)
	}
}
