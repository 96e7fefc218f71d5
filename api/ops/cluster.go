package ops

import (
	"context"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// FromCluster adapts a running cluster node to Node.
func FromCluster(n *cluster.Node) Node { return clusterNode{n} }

// clusterNode is a *cluster.Node seen as a Node (and a ConsistentViewer).
type clusterNode struct{ n *cluster.Node }

// NodeID implements Node.
func (c clusterNode) NodeID() string { return c.n.NodeID() }

// IsLeader implements Node.
func (c clusterNode) IsLeader() bool { return c.n.IsLeader() }

// Leader implements Node.
func (c clusterNode) Leader() (id, addr string) { return c.n.Leader() }

// Submit implements Node.
func (c clusterNode) Submit(ctx context.Context, cmd *proto.Command) (*proto.Result, error) {
	return c.n.Submit(ctx, cmd)
}

// View implements Node.
func (c clusterNode) View(fn func(State)) {
	c.n.View(func(m *fsm.Machine) { fn(machineState(m)) })
}

// ConsistentView implements ConsistentViewer.
func (c clusterNode) ConsistentView(ctx context.Context, fn func(State)) error {
	return c.n.ConsistentView(ctx, func(m *fsm.Machine) { fn(machineState(m)) })
}

// ClockProblem implements ClockChecker.
func (c clusterNode) ClockProblem() string { return c.n.ClockProblem() }

// RaftStats implements Node.
func (c clusterNode) RaftStats() RaftStats {
	s := c.n.Stats()
	return RaftStats{
		State:        s.State,
		Term:         s.Term,
		CommitIndex:  s.CommitIndex,
		AppliedIndex: s.AppliedIndex,
		LastLogIndex: s.LastLogIndex,
	}
}

// Groups implements GroupLister.
func (c clusterNode) Groups() []*proto.GroupStatus {
	gs := c.n.Groups()
	out := make([]*proto.GroupStatus, 0, len(gs))
	for _, g := range gs {
		out = append(out, &proto.GroupStatus{
			Id: g.ID, Members: g.Members, LeaderId: g.LeaderID, RaftState: g.Stats.State, Term: g.Stats.Term,
			CommitIndex: g.Stats.CommitIndex, AppliedIndex: g.Stats.AppliedIndex, FsmIndex: g.Stats.FSMIndex,
		})
	}
	return out
}

// Members implements Node.
func (c clusterNode) Members() []*proto.NodeStatus {
	ms := c.n.Members()
	out := make([]*proto.NodeStatus, 0, len(ms))
	for _, m := range ms {
		out = append(out, &proto.NodeStatus{
			Id: m.ID, RaftAddr: m.RaftAddr, GrpcAddr: m.GRPCAddr, AmqpAddr: m.AMQPAddr,
			Health: m.Health, Suffrage: m.Suffrage, Leader: m.Leader,
		})
	}
	return out
}

// TransferLeadership implements Node; the node waits for the transfer.
func (c clusterNode) TransferLeadership(_ context.Context, id string) error {
	return c.n.TransferLeadership(id)
}

// RemoveNode implements Node.
func (c clusterNode) RemoveNode(_ context.Context, id string) error {
	return c.n.RemoveNode(id)
}

// SubmitBatch implements BatchSubmitter for a cluster node.
func (c clusterNode) SubmitBatch(ctx context.Context, cmds []*proto.Command) ([]*proto.Result, error) {
	return c.n.SubmitBatch(ctx, cmds)
}

// machineState is the machine as a State; the assertion below keeps the
// two in step at compile time.
func machineState(m *fsm.Machine) State { return m }

var _ interface {
	State
	UserCredentials
} = (*fsm.Machine)(nil)

// ClusterStats reads the state machine's counters for the metrics, under
// the node's lock.
func ClusterStats(n *cluster.Node) func() StateStats {
	return func() StateStats {
		var st fsm.Stats
		var rel fsm.ReleaseStats
		n.View(func(m *fsm.Machine) { st, rel = m.Stats(), m.Releases() })
		out := fromFSMStats(st)
		out.Releases = rel
		return out
	}
}

// fromFSMStats maps the state machine's counters to the metrics' view.
// Dropped counts every copy that left a queue without being consumed or
// expiring: max-length drops, reject-publish refusals and client rejects.
func fromFSMStats(st fsm.Stats) StateStats {
	return StateStats{
		Published:      st.Published,
		Routed:         st.Routed,
		Delivered:      st.Delivered,
		Acked:          st.Acked,
		Expired:        st.Expired,
		DeadLettered:   st.DeadLettered,
		Dropped:        st.Dropped + st.Refused + st.Rejected,
		Ready:          st.Ready,
		Unacked:        st.Unacked,
		Overdue:        st.Overdue,
		Consumers:      st.Consumers,
		Queues:         st.Queues,
		ReadyBytes:     st.ReadyBytes,
		LeaseDueQueues: st.LeaseDueQueues,
		Deaths:         st.Deaths,
		Delayed:        st.Delayed,
	}
}
