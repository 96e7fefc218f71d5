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
	return lowestProtocol(f.Configuration().Servers, n.cfg.NodeID, n.protocol.Load(), n.members)
}

// lowestProtocol is the lowest protocol of servers: this node's own, and
// what the others gossip. A server not seen through gossip, or one that
// announces none (a version older than the announcement), counts as the
// first protocol, so a kind that needs more waits until every server has
// said it supports it.
func lowestProtocol(servers []raft.Server, self string, own uint32, members *memberTable) uint32 {
	low := own
	for _, s := range servers {
		v := uint32(1)
		if string(s.ID) == self {
			v = own
		} else if m, ok := members.get(string(s.ID)); ok && m.meta.GetProtocol() > 0 {
			v = m.meta.GetProtocol()
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
// in order, and the results come back in the same order.
func (n *Node) SubmitBatch(ctx context.Context, cmds []*proto.Command) ([]*proto.Result, error) {
	if len(cmds) == 0 {
		return nil, nil
	}
	n.gateFailed(cmds)
	deadline, hasDeadline := ctx.Deadline()
	if !hasDeadline {
		deadline = time.Now().Add(n.cfg.LeaderWait)
	}
	for {
		if n.isClosed() {
			return nil, ErrClosed
		}
		res, index, err := n.route(ctx, deadline, cmds)
		if err == nil {
			if len(res) != len(cmds) {
				return nil, fmt.Errorf("cluster: %d results for %d commands", len(res), len(cmds))
			}
			if err := n.applied.Wait(ctx, n.closing, index); err != nil {
				return nil, fmt.Errorf("cluster: committed at %d, not yet applied here: %w", index, err)
			}
			return res, nil
		}
		if !group.IsRetryable(err) || ctx.Err() != nil || !time.Now().Before(deadline) {
			return nil, err
		}
		// Nothing reached the log: wait for a leader change and try again.
		wait := n.changed.wait()
		t := time.NewTimer(min(50*time.Millisecond, time.Until(deadline)))
		select {
		case <-wait:
		case <-t.C:
		case <-ctx.Done():
		case <-n.closing:
		}
		t.Stop()
	}
}

// route sends the commands once: into the local group commit on a ready
// leader, over the forwarding stream otherwise.
func (n *Node) route(ctx context.Context, deadline time.Time, cmds []*proto.Command) ([]*proto.Result, uint64, error) {
	target, err := n.waitLeader(ctx, deadline)
	if err != nil {
		return nil, 0, err
	}
	p := group.NewRequest(cmds)
	if target.self {
		n.batcher.Enqueue(p)
		select {
		case <-p.Done():
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-n.closing:
			p.Finish(nil, 0, fmt.Errorf("%w: %w", ErrClosed, ErrOutcomeUnknown))
		}
		return p.Outcome()
	}
	return n.fwd.Submit(ctx, target.id, target.addr, p)
}

type leaderTarget struct {
	self     bool
	id, addr string // the leader's id and gRPC address
}

// waitLeader returns where commands go now, waiting for a leader (and its
// gRPC address) until the deadline.
func (n *Node) waitLeader(ctx context.Context, deadline time.Time) (leaderTarget, error) {
	for {
		wait := n.changed.wait()
		if n.lead.Load() != nil {
			return leaderTarget{self: true}, nil
		}
		if n.group.Raft().State() != raft.Leader {
			_, id := n.group.Raft().LeaderWithID()
			if id != "" && string(id) != n.cfg.NodeID {
				if m, ok := n.members.get(string(id)); ok && m.meta.GetGrpcAddr() != "" {
					return leaderTarget{id: string(id), addr: m.meta.GetGrpcAddr()}, nil
				}
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			return leaderTarget{}, ErrNoLeader
		}
		t := time.NewTimer(min(left, 100*time.Millisecond))
		select {
		case <-wait:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return leaderTarget{}, ctx.Err()
		case <-n.closing:
			t.Stop()
			return leaderTarget{}, ErrClosed
		}
		t.Stop()
	}
}

func (n *Node) isClosed() bool {
	select {
	case <-n.closing:
		return true
	default:
		return false
	}
}

// gateFailed clears Requeue.failed (basic.reject) while the log this node
// applied is below protocol level 8: below it a reject means what a nack
// does, and a server of an earlier release would refuse the field.
func (n *Node) gateFailed(cmds []*proto.Command) {
	var level uint32
	for _, c := range cmds {
		if r := c.GetRequeue(); r.GetFailed() {
			if level == 0 {
				n.View(func(m *fsm.Machine) { level = m.ProtocolLevel() })
			}
			if level < fsm.RetryLevel {
				r.Failed = false
			}
		}
	}
}
