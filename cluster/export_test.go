package cluster

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/cluster/group"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// HoldCommands has every leader of the process refuse the commands hold
// picks as of a later protocol than any server announces (540), until
// restore is called.
func HoldCommands(hold func(*proto.Command) bool) (restore func()) {
	saved := commandProtocol.Load()
	f := func(c *proto.Command) uint32 {
		if hold(c) {
			return fsm.Protocol + 1
		}
		return (*saved)(c)
	}
	commandProtocol.Store(&f)
	return func() { commandProtocol.Store(saved) }
}

// RaiseProtocol runs one round of the leader's protocol-level check now,
// so a test can tell "not raised" from "not checked yet".
func (n *Node) RaiseProtocol(ctx context.Context) { n.raiseProtocol(ctx) }

// ClockRound returns a channel closed when the node's next round of
// clock readings finishes.
func (n *Node) ClockRound() <-chan struct{} { return n.clocks.RoundDone() }

// RaftSnapshotThreshold is raft's entry threshold for a snapshot now.
func (n *Node) RaftSnapshotThreshold() uint64 {
	return n.group.Raft().ReloadableConfig().SnapshotThreshold
}

// MetaRaft is the raft of the node's metadata group.
func (n *Node) MetaRaft() *raft.Raft { return n.group.Raft() }

// ScaleSnapshotThreshold runs one round of the threshold's scaling now.
func (n *Node) ScaleSnapshotThreshold() { n.group.ScaleSnapshotThreshold() }

// ProposeQueueGroups runs one round of the leader's queue group check
// now.
func (n *Node) ProposeQueueGroups(ctx context.Context) { n.proposeQueueGroups(ctx) }

// QuietAppends reports how many appends the node's metadata group sent
// its followers and how many repeats it answered without sending.
func (n *Node) QuietAppends() (sent, answered uint64) { return n.group.Quiet().Counts() }

// HeartbeatsAnswered reports how many heartbeats the node's metadata
// group answered for its followers without sending them.
func (n *Node) HeartbeatsAnswered() uint64 { return n.group.Quiet().HeartbeatsAnswered() }

// CommitNewsTold is how many appends with news of a commit the metadata
// group's followers took from this node (group.CommitNews).
func (n *Node) CommitNewsTold() uint64 { return n.group.News().Told() }

// GroupLogEntries is LogEntries of queue group id's log on this node.
func (n *Node) GroupLogEntries(id string, fn func(index uint64, env *proto.Envelope) bool) error {
	qg := n.queueGroup(id)
	if qg == nil {
		return fmt.Errorf("%s runs no queue group %s", n.cfg.NodeID, id)
	}
	return logEntries(qg.g, fn)
}

// EffectsStream is how many streams of group id's effects this node
// opened, and the member it opened the last to.
func (n *Node) EffectsStream(id string) (opened int, source string) {
	n.rmu.Lock()
	f := n.remotes[id]
	n.rmu.Unlock()
	if f == nil {
		return 0, ""
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opened, f.source
}

// MetaLogEntry reads entry i of the node's metadata log.
func (n *Node) MetaLogEntry(i uint64) (*raft.Log, error) {
	var l raft.Log
	if err := n.group.Storage().Entries().GetLog(i, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// FailGroupBarriers has the next n barriers asked for by new queue group
// leaders fail as raft fails one asked for while a leadership transfer
// starts, until restore is called.
func FailGroupBarriers(n int) (restore func()) {
	saved := barrierOf.Load()
	var left atomic.Int64
	left.Store(int64(n))
	f := func(r *raft.Raft, timeout time.Duration) raft.Future {
		if left.Add(-1) >= 0 {
			return failedFuture{raft.ErrLeadershipTransferInProgress}
		}
		return (*saved)(r, timeout)
	}
	barrierOf.Store(&f)
	return func() { barrierOf.Store(saved) }
}

// NoRemovedSilence has a node that runs a queue group it is no longer
// meant to close it only when the group's configuration or leader says
// it was removed, not after a silence, until restore is called.
func NoRemovedSilence() (restore func()) {
	saved := removedQuiet.Swap(1 << 30)
	return func() { removedQuiet.Store(saved) }
}

type failedFuture struct{ err error }

func (f failedFuture) Error() error { return f.err }

// testGroup is the group id (group.DefaultID for the metadata group) as
// this node runs it, or nil.
func (n *Node) testGroup(id string) *group.Group {
	if id == group.DefaultID {
		return n.group
	}
	if qg := n.queueGroup(id); qg != nil {
		return qg.g
	}
	return nil
}

// Reached reports whether this node, leading group id, reached peer
// within a heartbeat timeout.
func (n *Node) Reached(id, peer string) bool {
	g := n.testGroup(id)
	return g != nil && g.Reached(raft.ServerID(peer))
}

// ConfigOrder is the ids of group id's servers in its raft
// configuration's order: the order a hand-over tries them in.
func (n *Node) ConfigOrder(id string) []string {
	g := n.testGroup(id)
	if g == nil {
		return nil
	}
	f := g.Raft().GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var ids []string
	for _, s := range f.Configuration().Servers {
		ids = append(ids, string(s.ID))
	}
	return ids
}
