package cluster

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/cluster/group"
	"github.com/raftmq/raftmq/cluster/membership"
	"github.com/raftmq/raftmq/proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// reachTransport records every raft RPC a server answers, and gives raft
// the RPCs it receives through rpcs (gapBridge).
type reachTransport struct {
	group.NoPipeline
	r    *membership.Reach
	rpcs <-chan raft.RPC
}

// Consumer implements raft.Transport.
func (t reachTransport) Consumer() <-chan raft.RPC { return t.rpcs }

func (t reachTransport) answered(id raft.ServerID, err error) error {
	if err == nil {
		t.r.Ack(string(id), time.Now())
	}
	return err
}

// AppendEntries implements raft.Transport (appends and heartbeats).
func (t reachTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	asked, err := t.NoPipeline.Append(id, target, args, resp)
	if !asked {
		// Answered from the follower's last answer: not news of it.
		return err
	}
	return t.answered(id, err)
}

// RequestVote implements raft.Transport.
func (t reachTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return t.answered(id, t.NoPipeline.RequestVote(id, target, args, resp))
}

// RequestPreVote implements raft.WithPreVote.
func (t reachTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.answered(id, t.NoPipeline.RequestPreVote(id, target, args, resp))
}

// InstallSnapshot implements raft.Transport.
func (t reachTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	return t.answered(id, t.NoPipeline.InstallSnapshot(id, target, args, resp, data))
}

// TimeoutNow implements raft.Transport.
func (t reachTransport) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	return t.answered(id, t.NoPipeline.TimeoutNow(id, target, args, resp))
}

// watchLeaders follows raft's leader changes to remember the leaders this
// node lost and when it last heard from each (membership.Reach.Reset).
func (n *Node) watchLeaders(r *raft.Raft) {
	obs := make(chan raft.Observation, 64)
	r.RegisterObserver(raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	}))
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		for {
			select {
			case o := <-obs:
				if lo, ok := o.Data.(raft.LeaderObservation); ok {
					n.reach.LeaderChanged(n.cfg.NodeID, string(lo.LeaderID), time.Now(), r.LastContact(), n.cfg.NodeDownAfter)
				}
			case <-n.closing:
				return
			}
		}
	}()
}

// resetReach starts the leader's count of its servers' silence.
func (n *Node) resetReach() {
	now := time.Now()
	n.reach.Reset(now, now.Add(-n.cfg.NodeDownAfter+n.firstAppendGrace()))
}

// firstAppendGrace is how long a new leader leaves its predecessor to
// answer the term's first appends before counting its silence from when
// this node last heard from it: a predecessor that handed over
// leadership answers within a round trip.
func (n *Node) firstAppendGrace() time.Duration {
	return max(n.cfg.NodeDownAfter/4, n.cfg.HeartbeatTimeout/5)
}

// pingPeer asks the voter id whether it answers, and records when it
// does. It calls Internal.Clock, which the gRPC server answers at once
// whatever the state of the node's raft. Any answer counts, a refusal too
// (an older node that does not know Clock answers Unimplemented): only a
// call that got no answer in time says nothing was reached.
func (n *Node) pingPeer(id, addr string, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ctx, stop := n.untilClosed(ctx)
	defer stop()
	conn, err := n.replyConns.conn(n, id, addr)
	if err != nil {
		return
	}
	_, err = proto.NewInternalClient(conn).Clock(ctx, &proto.ClockRequest{})
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return
	}
	n.reach.Ping(id, time.Now())
}

// unreachable lists, on the ready leader, the servers of the raft
// configuration whose heartbeats fail now; nil elsewhere.
func (n *Node) unreachable() []string {
	if !n.IsLeader() {
		return nil
	}
	f := n.group.Raft().GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var ids []string
	for _, s := range f.Configuration().Servers {
		ids = append(ids, string(s.ID))
	}
	return n.reach.Unreachable(ids, n.cfg.NodeID, membership.UnreachedAfter(n.cfg.HeartbeatTimeout, n.cfg.NodeDownAfter))
}

// answering reports whether node id is worth a stream: gossip finds it
// alive and it is not in suspect (a suspects() read once for several
// nodes). addr is its gRPC address.
func (n *Node) answering(id string, suspect map[string]bool) (addr string, ok bool) {
	m, found := n.members.Get(id)
	if !found || m.Health != HealthAlive || suspect[id] {
		return "", false
	}
	return m.Meta.GetGrpcAddr(), true
}

// suspects is whom raft does not reach as this node knows it: its own
// reach on the leader, elsewhere what the leader gossips.
func (n *Node) suspects() map[string]bool {
	if n.IsLeader() {
		out := map[string]bool{}
		for _, id := range n.unreachable() {
			out[id] = true
		}
		return out
	}
	leader, _ := n.Leader()
	return n.gossip.Suspects(leader)
}
