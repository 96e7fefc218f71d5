package membership

import (
	"sync"
	"time"
)

// Reach is what this node knows of whom it reaches: when each server last
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
// is wrapped (the node's reachTransport) to see the same thing: an RPC that returns
// without error was answered. Heartbeats go on their own connection every
// HeartbeatTimeout/10, also while a long append or a snapshot is in
// flight, and the follower answers them outside its main loop, so a live
// server is never silent for long.
//
// Gossip alone decided NodeDown once, and gossip can miss a death:
// memberlist forgets dead members after a while, so a leader elected
// later never heard of them. Raft's leader replicates to every server of
// the configuration whatever gossip says.
type Reach struct {
	mu     sync.Mutex
	acked  map[string]time.Time // server id -> last answered raft RPC (any term)
	pinged map[string]time.Time // server id -> last answered Ping
	since  map[string]time.Time // this term: when the leader began counting the server

	// The leaders this node followed and lost since it last had one
	// leader for a settled while, each with when this node last heard
	// from it (LeaderChanged). An election can fail to hold: when the
	// metadata group elects twice while its old leader is frozen, the
	// leader that counts the frozen one is the third of the run, and the
	// frozen one is not the leader it followed just before.
	lost     map[string]time.Time
	cur      string    // this node's leader now, "" while none
	curSince time.Time // since when
	// ledLast: the last leader this node knew of was itself.
	ledLast bool
}

// NewReach returns a Reach that has heard from no one.
func NewReach() *Reach {
	return &Reach{acked: map[string]time.Time{}, pinged: map[string]time.Time{}, since: map[string]time.Time{}, lost: map[string]time.Time{}}
}

// Ack records that the server id answered a raft RPC at t.
func (r *Reach) Ack(id string, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t.After(r.acked[id]) {
		r.acked[id] = t
	}
}

// Ping records that the server id answered a Ping at t.
func (r *Reach) Ping(id string, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t.After(r.pinged[id]) {
		r.pinged[id] = t
	}
}

// Reset starts a term of leadership at now. Every server gets
// NodeDownAfter from now to answer, except the leaders this node followed
// and lost since it last had a settled leader: each has been silent since
// this node last heard from it, which is what made the group elect, so it
// is counted from then, though not from earlier than floor, which leaves
// the new term's first appends time to reach it.
func (r *Reach) Reset(now, floor time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.since)
	for id, heard := range r.lost {
		if !heard.IsZero() {
			r.since[id] = maxTime(heard, floor)
		}
	}
}

// LeaderChanged records that this node's leader is next from now on (""
// while it has none). self is this node's id, heard when this node last
// heard from the leader it had until now. A leader that held its place
// for settled (NodeDownAfter) had time to count the servers itself, so
// the leaders lost before it are forgotten. Another node's place is
// measured up to when this node last heard from it, not up to now: a
// follower notices a lost leader a heartbeat timeout after the leader
// stepped down, and a leader that stepped down before its own count of
// the frozen one was up declared nothing.
func (r *Reach) LeaderChanged(self, next string, now, heard time.Time, settled time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if next == r.cur {
		return
	}
	if r.cur != "" {
		end := heard
		if r.cur == self {
			end = now
		}
		if end.Sub(r.curSince) >= settled {
			clear(r.lost)
		}
		if r.cur != self {
			r.lost[r.cur] = maxTime(r.lost[r.cur], heard)
		}
	}
	if next != "" {
		r.ledLast = next == self
	}
	r.cur, r.curSince = next, now
}

// WasLeader reports whether the last leader this node knew of was itself.
func (r *Reach) WasLeader() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ledLast
}

// SilentFor is how long the server id has not answered the leader: since
// its last answered RPC, or since the leader began counting it (this
// term's start, or when the leader first asked).
func (r *Reach) SilentFor(id string, now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	base, ok := r.since[id]
	if !ok {
		base = now
		r.since[id] = now
	}
	return now.Sub(maxTime(base, r.acked[id]))
}

// LastAck is when the server id last answered a raft RPC of this node.
func (r *Reach) LastAck(id string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.acked[id]
}

// LastHeard is when the server id last answered this node at all (a raft
// RPC or a Ping).
func (r *Reach) LastHeard(id string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maxTime(r.acked[id], r.pinged[id])
}

// maxTime is the later of a and b.
func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
