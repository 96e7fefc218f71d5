package membership

import (
	"slices"
	"time"
)

// HealthSuspect is a member gossip still finds alive (or never heard of)
// but raft does not reach: the leader's heartbeats to it fail. (A dead
// leader is one for the leader elected after it.)
//
// Gossip takes seconds to declare a member dead (memberlist's suspicion
// timeout, longer in bigger clusters), so a killed node would show alive
// for that long. Raft's leader heartbeats every server many times a
// second and learns at once when one stops answering (Reach): that is
// what operators should see. The leader gossips whom it does not reach
// (NodeMeta.unreachable), so every node shows the same.
const HealthSuspect = "suspect"

// reachPublishInterval is how often the leader compares whom raft reaches
// with what it gossips.
const reachPublishInterval = 200 * time.Millisecond

// maxGossipedUnreachable bounds the ids the leader gossips, which must fit
// memberlist's metadata limit with the rest of the node's metadata.
const maxGossipedUnreachable = 8

// Unreachable lists, of the servers of the leader's raft configuration
// other than self, those that left its raft RPCs unanswered for after,
// sorted.
func (r *Reach) Unreachable(servers []string, self string, after time.Duration) []string {
	var out []string
	now := time.Now()
	for _, id := range servers {
		if id == self {
			continue
		}
		if r.SilentFor(id, now) >= after {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// UnreachedAfter is how long a server may leave the leader's raft RPCs
// unanswered before operators see it suspect, well before NodeDownAfter.
// An idle group's leader sends a fresh follower only every other
// heartbeat (group.QuietAppends), so the RPCs that go, which are all
// Reach hears of, can be up to twice HeartbeatTimeout/5 apart; this is
// that and half as much again, and never less than a fifth of
// NodeDownAfter.
func UnreachedAfter(heartbeatTimeout, nodeDownAfter time.Duration) time.Duration {
	return max(heartbeatTimeout*3/5, nodeDownAfter/5)
}

// Suspects is whom the leader gossips raft does not reach, as the member
// leader's metadata says, but this node itself.
func (g *Gossip) Suspects(leader string) map[string]bool {
	out := map[string]bool{}
	if leader == "" || leader == g.cfg.NodeID {
		return out
	}
	if m, ok := g.members.Get(leader); ok {
		for _, id := range m.Meta.GetUnreachable() {
			if id != g.cfg.NodeID {
				out[id] = true
			}
		}
	}
	return out
}

// PublishUnreachable keeps this node's gossiped unreachable list equal to
// what unreachable says (nil but on the ready leader), until closing.
// Only a leader's list changes with time, so it is looked at every
// reachPublishInterval while the node leads (or the last update failed);
// otherwise the loop waits for changed to fire (the node's leadership
// changed), not waking every interval to find nothing to say.
func (g *Gossip) PublishUnreachable(closing <-chan struct{}, changed func() <-chan struct{}, unreachable func() (ids []string, leading bool)) {
	t := time.NewTimer(reachPublishInterval)
	defer t.Stop()
	var published []string
	for {
		wait := changed()
		now, leading := unreachable()
		if len(now) > maxGossipedUnreachable {
			now = now[:maxGossipedUnreachable]
		}
		if !slices.Equal(now, published) {
			// The update waits, at most a second, for the change to
			// be broadcast; the next look tries again if it fails.
			if err := g.SetUnreachable(now); err != nil {
				g.cfg.Logger.Debug("gossip the unreachable servers", "err", err)
			} else {
				published = now
			}
		}
		var tick <-chan time.Time
		if leading || !slices.Equal(now, published) {
			t.Reset(reachPublishInterval)
			tick = t.C
		}
		select {
		case <-tick:
		case <-wait:
		case <-closing:
			return
		}
	}
}
