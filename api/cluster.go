package api

import (
	"context"
	"reflect"

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

// machineState returns the machine as a State. While the machine lacks
// some read method, machineReads answers that method with nothing, so each
// read lights up as soon as the state machine provides it.
func machineState(m *fsm.Machine) State {
	if s, ok := any(m).(State); ok {
		return s
	}
	return machineReads{m}
}

// machineReads serves State from whichever read methods the machine has.
type machineReads struct{ m *fsm.Machine }

func (r machineReads) Queues(vhost string) []*proto.QueueInfo {
	if x, ok := any(r.m).(interface {
		Queues(string) []*proto.QueueInfo
	}); ok {
		return x.Queues(vhost)
	}
	return nil
}

func (r machineReads) Queue(vhost, name string) (*proto.QueueInfo, bool) {
	if x, ok := any(r.m).(interface {
		Queue(string, string) (*proto.QueueInfo, bool)
	}); ok {
		return x.Queue(vhost, name)
	}
	return nil, false
}

func (r machineReads) Exchanges(vhost string) []*proto.ExchangeInfo {
	if x, ok := any(r.m).(interface {
		Exchanges(string) []*proto.ExchangeInfo
	}); ok {
		return x.Exchanges(vhost)
	}
	return nil
}

func (r machineReads) Bindings(vhost string) []*proto.BindingInfo {
	if x, ok := any(r.m).(interface {
		Bindings(string) []*proto.BindingInfo
	}); ok {
		return x.Bindings(vhost)
	}
	return nil
}

func (r machineReads) Consumers(vhost string) []*proto.ConsumerInfo {
	if x, ok := any(r.m).(interface {
		Consumers(string) []*proto.ConsumerInfo
	}); ok {
		return x.Consumers(vhost)
	}
	return nil
}

func (r machineReads) Policies(vhost string, operator bool) []*proto.PolicyInfo {
	if x, ok := any(r.m).(interface {
		Policies(string, bool) []*proto.PolicyInfo
	}); ok {
		return x.Policies(vhost, operator)
	}
	return nil
}

func (r machineReads) Users() []*proto.UserInfo {
	if x, ok := any(r.m).(interface{ Users() []*proto.UserInfo }); ok {
		return x.Users()
	}
	return nil
}

func (r machineReads) Permissions() []*proto.PermissionInfo {
	if x, ok := any(r.m).(interface {
		Permissions() []*proto.PermissionInfo
	}); ok {
		return x.Permissions()
	}
	return nil
}

func (r machineReads) Vhosts() []*proto.VhostInfo {
	if x, ok := any(r.m).(interface{ Vhosts() []*proto.VhostInfo }); ok {
		return x.Vhosts()
	}
	return nil
}

func (r machineReads) Digest() [32]byte     { return r.m.Digest() }
func (r machineReads) AppliedIndex() uint64 { return r.m.AppliedIndex() }
func (r machineReads) Clock() int64         { return r.m.Clock() }

// Initialized falls back to "something was applied" while the machine
// cannot tell whether the defaults are in.
func (r machineReads) Initialized() bool {
	if x, ok := any(r.m).(interface{ Initialized() bool }); ok {
		return x.Initialized()
	}
	return r.m.AppliedIndex() > 0
}

// ClusterStats reads the state machine's counters for the metrics: it calls
// the machine's Stats method under the node's lock and copies each numeric
// field whose name matches a StateStats field (Published, Delivered, Acked,
// Expired, DeadLettered, Dropped, Ready, Unacked, Overdue, Consumers,
// Queues, ReadyBytes, LeaseDueQueues). Fields the machine does not report
// stay 0.
func ClusterStats(n *cluster.Node) func() StateStats {
	return func() StateStats {
		var out StateStats
		n.View(func(m *fsm.Machine) { out = copyStats(m) })
		return out
	}
}

// copyStats copies the same-named numeric fields of m.Stats() into a
// StateStats.
func copyStats(m any) StateStats {
	var out StateStats
	meth := reflect.ValueOf(m).MethodByName("Stats")
	if !meth.IsValid() || meth.Type().NumIn() != 0 || meth.Type().NumOut() != 1 {
		return out
	}
	src := meth.Call(nil)[0]
	if src.Kind() == reflect.Pointer {
		if src.IsNil() {
			return out
		}
		src = src.Elem()
	}
	if src.Kind() != reflect.Struct {
		return out
	}
	dst := reflect.ValueOf(&out).Elem()
	for i := range dst.NumField() {
		f := src.FieldByName(dst.Type().Field(i).Name)
		if !f.IsValid() {
			continue
		}
		switch f.Kind() {
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			dst.Field(i).SetUint(f.Uint())
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			if v := f.Int(); v > 0 {
				dst.Field(i).SetUint(uint64(v))
			}
		}
	}
	return out
}
