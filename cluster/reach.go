package cluster

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/cluster/group"
	"github.com/raftmq/raftmq/proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// reach is what this node knows of whom it reaches: when each server last
// answered one of its raft RPCs (appends and heartbeats while it leads,
// votes while it stands, snapshots), when each last answered a Ping, and,
// for the leader, since when it counts each server this term.
//
// The leader declares a server down once it has answered nothing for
// NodeDownAfter, whether its connection fails (a dead node's port refuses
// at once) or stays silent (a frozen process, a partition that drops
// packets). Raft's FailedHeartbeatObservation, which this used to wait
// for, comes only when a heartbeat RPC fails, and a silent peer's RPC
// fails only at the transport's I/O timeout (10 s): the frozen node's
// consumers kept their messages that long. The timeout itself stays: it
// is also the deadline of every AppendEntries, which may carry 256
// entries of up to a whole batch each, and the base of InstallSnapshot's.
// Raft's own per-follower last contact is not exported, so the transport
// is wrapped (reachTransport) to see the same thing: an RPC that returns
// without error was answered. Heartbeats go on their own connection every
// HeartbeatTimeout/10, also while a long append or a snapshot is in
// flight, and the follower answers them outside its main loop, so a live
// server is never silent for long.
//
// Gossip alone decided NodeDown once, and gossip can miss a death:
// memberlist forgets dead members after a while, so a leader elected
// later never heard of them. Raft's leader replicates to every server of
// the configuration whatever gossip says.
type reach struct {
	mu     sync.Mutex
	acked  map[string]time.Time // server id -> last answered raft RPC (any term)
	pinged map[string]time.Time // server id -> last answered Ping
	since  map[string]time.Time // this term: when the leader began counting the server

	// The leader this node last followed, and when it last heard from
	// it, recorded when that leader went away (watchLeaders).
	prevLeader string
	prevHeard  time.Time
	// ledLast: the last leader this node knew of was itself.
	ledLast bool
}

func newReach() *reach {
	return &reach{acked: map[string]time.Time{}, pinged: map[string]time.Time{}, since: map[string]time.Time{}}
}

func (r *reach) ack(id raft.ServerID, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t.After(r.acked[string(id)]) {
		r.acked[string(id)] = t
	}
}

func (r *reach) ping(id string, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t.After(r.pinged[id]) {
		r.pinged[id] = t
	}
}

// reset starts a term of leadership at now. Every server gets
// NodeDownAfter from now to answer, except the leader this node followed
// before: it has been silent since this node last heard from it, which
// is what made this node stand, so it is counted from then, though not
// from earlier than floor, which leaves the new term's first appends time
// to reach it.
func (r *reach) reset(now, floor time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.since)
	if r.prevLeader != "" && !r.prevHeard.IsZero() {
		r.since[r.prevLeader] = maxTime(r.prevHeard, floor)
	}
}

// leaderGone records that the leader this node followed is no longer its
// leader, and when this node last heard from it.
func (r *reach) leaderGone(id string, heard time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prevLeader, r.prevHeard = id, heard
}

func (r *reach) setLedLast(v bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ledLast = v
}

// wasLeader reports whether the last leader this node knew of was itself.
func (r *reach) wasLeader() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ledLast
}

// silentFor is how long the server id has not answered the leader: since
// its last answered RPC, or since the leader began counting it (this
// term's start, or when the leader first asked).
func (r *reach) silentFor(id string, now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	base, ok := r.since[id]
	if !ok {
		base = now
		r.since[id] = now
	}
	return now.Sub(maxTime(base, r.acked[id]))
}

// lastAck is when the server id last answered a raft RPC of this node.
func (r *reach) lastAck(id string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.acked[id]
}

// lastHeard is when the server id last answered this node at all (a raft
// RPC or a Ping).
func (r *reach) lastHeard(id string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maxTime(r.acked[id], r.pinged[id])
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// reachTransport records every raft RPC a server answers, and gives raft
// the RPCs it receives through rpcs (gapBridge).
type reachTransport struct {
	group.NoPipeline
	r    *reach
	rpcs <-chan raft.RPC
}

// Consumer implements raft.Transport.
func (t reachTransport) Consumer() <-chan raft.RPC { return t.rpcs }

func (t reachTransport) answered(id raft.ServerID, err error) error {
	if err == nil {
		t.r.ack(id, time.Now())
	}
	return err
}

// AppendEntries implements raft.Transport (appends and heartbeats).
func (t reachTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return t.answered(id, t.NoPipeline.AppendEntries(id, target, args, resp))
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

// watchLeaders follows raft's leader changes to remember the leader this
// node last followed and when it last heard from it (reach.reset).
func (n *Node) watchLeaders(r *raft.Raft) {
	obs := make(chan raft.Observation, 64)
	r.RegisterObserver(raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	}))
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		var cur string
		for {
			select {
			case o := <-obs:
				lo, ok := o.Data.(raft.LeaderObservation)
				if !ok {
					continue
				}
				next := string(lo.LeaderID)
				if cur != "" && cur != n.cfg.NodeID && next != cur {
					n.reach.leaderGone(cur, r.LastContact())
				}
				if next != "" {
					n.reach.setLedLast(next == n.cfg.NodeID)
				}
				cur = next
			case <-n.closing:
				return
			}
		}
	}()
}

// resetReach starts the leader's count of its servers' silence.
func (n *Node) resetReach() {
	now := time.Now()
	n.reach.reset(now, now.Add(-n.cfg.NodeDownAfter+n.firstAppendGrace()))
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
	n.reach.ping(id, time.Now())
}
