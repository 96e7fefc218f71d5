package ops

import (
	"context"
	"maps"
	"slices"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/broker"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// FromCluster adapts a running cluster node to Node.
func FromCluster(n *cluster.Node) Node { return clusterNode{n, broker.New(n, nil)} }

// clusterNode is a *cluster.Node seen as a Node (and a ConsistentViewer).
// Its commands go where the AMQP server's go (cluster/broker): a purge
// or delete of a queue placed in a queue group reaches that group.
type clusterNode struct {
	n *cluster.Node
	b *broker.Broker
}

// NodeID implements Node.
func (c clusterNode) NodeID() string { return c.n.NodeID() }

// IsLeader implements Node.
func (c clusterNode) IsLeader() bool { return c.n.IsLeader() }

// Leader implements Node.
func (c clusterNode) Leader() (id, addr string) { return c.n.Leader() }

// Submit implements Node.
func (c clusterNode) Submit(ctx context.Context, cmd *proto.Command) (*proto.Result, error) {
	return c.b.Submit(ctx, cmd)
}

// View implements Node.
func (c clusterNode) View(fn func(State)) {
	far := c.farGroups(context.Background())
	c.n.View(func(m *fsm.Machine) { fn(c.placed(m, far)) })
}

// LocalView implements Node.
func (c clusterNode) LocalView(fn func(State)) {
	c.n.View(func(m *fsm.Machine) { fn(c.placed(m, nil)) })
}

// Refusing implements ClientRefuser.
func (c clusterNode) Refusing() string { return c.n.Refusing() }

// ConsistentView implements ConsistentViewer.
func (c clusterNode) ConsistentView(ctx context.Context, fn func(State)) error {
	far := c.farGroups(ctx)
	return c.n.ConsistentView(ctx, func(m *fsm.Machine) { fn(c.placed(m, far)) })
}

// farGroups reads, from their members, the queue groups the metadata
// names that this node does not run (a cluster larger than a group),
// before the metadata's lock is taken. A group none of whose members
// answers is left out: its queues show the metadata's record only.
func (c clusterNode) farGroups(ctx context.Context) map[string]*proto.GroupQueuesResponse {
	if !c.n.HasQueueGroups() {
		return nil
	}
	running := c.n.RunningQueueGroups()
	var far map[string]*proto.GroupQueuesResponse
	for _, id := range c.n.NamedQueueGroups() {
		if slices.Contains(running, id) {
			continue
		}
		r, err := c.n.RemoteGroupQueues(ctx, id)
		if err != nil {
			continue
		}
		if far == nil {
			far = map[string]*proto.GroupQueuesResponse{}
		}
		far[id] = r
	}
	return far
}

// placed is the metadata machine m as a State, with the queues it placed
// in queue groups shown as their groups hold them (their messages, their
// consumers): those of the groups this node runs as it applied them,
// those of far, read from other nodes, as a member applied them (without
// their rates). Called under the metadata group's lock; it takes each
// group's after it, the order the mirror takes them in.
func (c clusterNode) placed(m *fsm.Machine, far map[string]*proto.GroupQueuesResponse) State {
	if !m.Placing() {
		return machineState(m)
	}
	p := placedState{Machine: m, queues: map[string]*proto.QueueInfo{}, counts: map[string]fsm.QueueCounts{}}
	for _, id := range slices.Sorted(maps.Keys(far)) {
		p.add(id, far[id].GetQueues(), far[id].GetConsumers())
	}
	for _, id := range c.n.RunningQueueGroups() {
		c.n.ViewGroup(id, func(g *fsm.Machine) {
			p.add(id, g.Queues(""), g.Consumers(""))
			for _, qc := range g.QueueCounts() {
				if at, ok := m.QueuePlacement(qc.Vhost, qc.Name); ok && at == id {
					p.counts[qc.Vhost+"\x00"+qc.Name] = qc
				}
			}
		})
	}
	return p
}

// add takes group id's queues and consumers that the metadata places in
// it (a group's log may hold a queue the metadata deleted a moment ago).
func (p *placedState) add(id string, queues []*proto.QueueInfo, consumers []*proto.ConsumerInfo) {
	for _, q := range queues {
		if at, ok := p.QueuePlacement(q.GetVhost(), q.GetName()); ok && at == id {
			q.RaftGroup = id
			p.queues[q.GetVhost()+"\x00"+q.GetName()] = q
		}
	}
	for _, x := range consumers {
		if at, ok := p.QueuePlacement(x.GetVhost(), x.GetQueue()); ok && at == id {
			p.consumers = append(p.consumers, x)
		}
	}
}

// placedState is a metadata machine whose placed queues read from their
// groups.
type placedState struct {
	*fsm.Machine
	queues    map[string]*proto.QueueInfo // by vhost and name
	counts    map[string]fsm.QueueCounts  // by vhost and name
	consumers []*proto.ConsumerInfo
}

func (p placedState) QueueCounts() []fsm.QueueCounts {
	qcs := p.Machine.QueueCounts()
	for i, qc := range qcs {
		if g, ok := p.counts[qc.Vhost+"\x00"+qc.Name]; ok {
			qcs[i] = g
		}
	}
	return qcs
}

func (p placedState) Queues(vhost string) []*proto.QueueInfo {
	qs := p.Machine.Queues(vhost)
	for i, q := range qs {
		if g, ok := p.queues[q.GetVhost()+"\x00"+q.GetName()]; ok {
			qs[i] = g
		}
	}
	return qs
}

func (p placedState) Queue(vhost, name string) (*proto.QueueInfo, bool) {
	q, ok := p.Machine.Queue(vhost, name)
	if g, placed := p.queues[vhost+"\x00"+name]; ok && placed {
		q = g
	}
	return q, ok
}

func (p placedState) Consumers(vhost string) []*proto.ConsumerInfo {
	out := p.Machine.Consumers(vhost)
	for _, x := range p.consumers {
		if vhost == "" || x.GetVhost() == vhost {
			out = append(out, x)
		}
	}
	return out
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

// Groups implements Node.
func (c clusterNode) Groups() []GroupStatus { return append(c.n.Groups(), c.n.FarGroups()...) }

// QueueGroup implements Node.

// GrowGroups implements Node.
func (c clusterNode) GrowGroups(ctx context.Context, id string, even bool) ([]GroupChange, error) {
	return c.n.GrowGroups(ctx, id, even)
}

// ShrinkGroups implements Node.
func (c clusterNode) ShrinkGroups(ctx context.Context, id string) ([]GroupChange, error) {
	return c.n.ShrinkGroups(ctx, id)
}

// RebalanceGroups implements Node.
func (c clusterNode) RebalanceGroups(ctx context.Context) (map[string]int, error) {
	return c.n.RebalanceGroups(ctx)
}

// GroupDigest implements Node.
func (c clusterNode) GroupDigest(id string) (d [32]byte, applied uint64, ok bool) {
	if id == "" {
		return d, 0, false
	}
	ok = c.n.ViewGroup(id, func(m *fsm.Machine) { d, applied = m.Digest(), m.AppliedIndex() })
	return d, applied, ok
}

// SubmitBatch implements BatchSubmitter for a cluster node.
func (c clusterNode) SubmitBatch(ctx context.Context, cmds []*proto.Command) ([]*proto.Result, error) {
	return c.b.SubmitBatch(ctx, cmds)
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
		// Placed queues live in the queue groups, whose counters and
		// gauges add to the metadata log's; their queues are counted
		// once, as the metadata's records.
		for _, id := range n.RunningQueueGroups() {
			n.ViewGroup(id, func(m *fsm.Machine) { st = addStats(st, m.Stats()) })
		}
		out := fromFSMStats(st)
		out.Releases = rel
		return out
	}
}

// addStats adds a queue group's counters and gauges to st, but for its
// queues, which the metadata's records count.
func addStats(st, g fsm.Stats) fsm.Stats {
	st.Published += g.Published
	st.Routed += g.Routed
	st.Delivered += g.Delivered
	st.Acked += g.Acked
	st.Requeued += g.Requeued
	st.Expired += g.Expired
	st.DeadLettered += g.DeadLettered
	st.Dropped += g.Dropped
	st.Refused += g.Refused
	st.Rejected += g.Rejected
	st.Purged += g.Purged
	st.Ready += g.Ready
	st.ReadyBytes += g.ReadyBytes
	st.Unacked += g.Unacked
	st.Consumers += g.Consumers
	st.Overdue += g.Overdue
	st.LeaseDueQueues += g.LeaseDueQueues
	st.Delayed += g.Delayed
	for i := range st.Deaths {
		for j := range st.Deaths[i] {
			st.Deaths[i][j] += g.Deaths[i][j]
		}
	}
	return st
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
