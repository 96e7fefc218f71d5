package cluster

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftmq/raftmq/cluster/group"
	"github.com/raftmq/raftmq/cluster/membership"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/internal/broadcast"
	"github.com/raftmq/raftmq/proto"
)

// commandProtocol holds fsm.CommandProtocol; tests give a kind a higher
// protocol.
var commandProtocol atomic.Pointer[func(*proto.Command) uint32]

func init() {
	f := fsm.CommandProtocol
	commandProtocol.Store(&f)
}

// clusterProtocol is the lowest command protocol announced by the servers
// of the latest raft configuration.
func (n *Node) clusterProtocol() uint32 {
	f := n.group.Raft().GetConfiguration()
	if f.Error() != nil {
		return 1
	}
	return lowestProtocol(f.Configuration().Servers, n.cfg.NodeID, n.gossip.Protocol(), n.members, func() (level uint32) {
		n.View(func(m *fsm.Machine) { level = m.ProtocolLevel() })
		return level
	})
}

// lowestProtocol is the lowest protocol of servers: this node's own, and
// what the others gossip. One that announces none (a version older than
// the announcement) counts as the first protocol, so a kind that needs
// more waits until every server has said it supports it. One this node
// has not seen through gossip yet (a node that has just joined, added by
// the leader, which saw it first) counts as the level of the log
// (logLevel, read only then): it applies the log, whose level every
// server announced when it was raised, so a kind the log already takes
// is not refused for the moment gossip takes to spread, while a kind
// above the log's level still waits for its announcement.
func lowestProtocol(servers []raft.Server, self string, own uint32, members *membership.Table, logLevel func() uint32) uint32 {
	low := own
	unseen := uint32(0)
	for _, s := range servers {
		v := uint32(1)
		if string(s.ID) == self {
			v = own
		} else if m, ok := members.Get(string(s.ID)); ok && m.Meta.GetProtocol() > 0 {
			v = m.Meta.GetProtocol()
		} else if !ok {
			if unseen == 0 {
				unseen = max(1, logLevel())
			}
			v = unseen
		}
		low = min(low, v)
	}
	return low
}

// Submit proposes one command and returns its result once the command has
// committed AND this node's state machine has applied it (so the effects for
// local consumers have been emitted and the caller reads its own write).
// On a follower the command is forwarded to the leader. Commands that never
// reached a leader are sent again while a leader is awaited; an error never
// hides a commit, and ErrOutcomeUnknown means the outcome is unknown.
func (n *Node) Submit(ctx context.Context, cmd *proto.Command) (*proto.Result, error) {
	res, err := n.SubmitBatch(ctx, []*proto.Command{cmd})
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// SubmitBatch is Submit for several commands: they go into ONE log entry,
// in order, and the results come back in the same order
// (group.Submitter).
func (n *Node) SubmitBatch(ctx context.Context, cmds []*proto.Command) ([]*proto.Result, error) {
	return n.group.Submitter().SubmitBatch(ctx, cmds)
}

// waitLeader returns where the metadata group's commands go now,
// waiting for a leader (and its gRPC address) until the deadline.
func (n *Node) waitLeader(ctx context.Context, deadline time.Time) (group.Target, error) {
	return n.awaitLeader(ctx, deadline, n.group, func() bool { return n.lead.Load() != nil }, n.changed, n.closing)
}

// awaitLeader returns where the commands of g go now: this node while
// leading says it is a ready leader, else the leader raft knows of at
// its gRPC address from gossip; it waits for one until the deadline,
// looking again when changed signals. It stops with ErrClosed once
// closing is closed: the node closes, or leaves the queue group g, whose
// raft then never learns of a leader again.
func (n *Node) awaitLeader(ctx context.Context, deadline time.Time, g *group.Group, leading func() bool, changed *broadcast.Broadcast, closing <-chan struct{}) (group.Target, error) {
	for {
		wait := changed.Wait()
		if leading() {
			return group.Target{Self: true}, nil
		}
		if g.Raft().State() != raft.Leader {
			_, id := g.Raft().LeaderWithID()
			if id != "" && string(id) != n.cfg.NodeID {
				if m, ok := n.members.Get(string(id)); ok && m.Meta.GetGrpcAddr() != "" {
					return group.Target{ID: string(id), Addr: m.Meta.GetGrpcAddr()}, nil
				}
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			return group.Target{}, ErrNoLeader
		}
		t := time.NewTimer(min(left, 100*time.Millisecond))
		select {
		case <-wait:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return group.Target{}, ctx.Err()
		case <-closing:
			t.Stop()
			return group.Target{}, ErrClosed
		}
		t.Stop()
	}
}
