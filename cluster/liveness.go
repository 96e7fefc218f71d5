package cluster

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
// second and learns at once when one stops answering (reach): that is
// what operators should see. The leader gossips whom it does not reach
// (NodeMeta.unreachable), so every node shows the same.
const HealthSuspect = "suspect"

// reachPublishInterval is how often the leader compares whom raft reaches
// with what it gossips.
const reachPublishInterval = 200 * time.Millisecond

// maxGossipedUnreachable bounds the ids the leader gossips, which must fit
// memberlist's metadata limit with the rest of the node's metadata.
const maxGossipedUnreachable = 8

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
	var out []string
	now := time.Now()
	for _, s := range f.Configuration().Servers {
		id := string(s.ID)
		if id == n.cfg.NodeID {
			continue
		}
		if n.reach.SilentFor(id, now) >= n.unreachedAfter() {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// suspects is whom raft does not reach as this node knows it: its own
// reach on the leader, elsewhere what the leader gossips.
func (n *Node) suspects() map[string]bool {
	out := map[string]bool{}
	if n.IsLeader() {
		for _, id := range n.unreachable() {
			out[id] = true
		}
		return out
	}
	leader, _ := n.Leader()
	if leader == "" || leader == n.cfg.NodeID {
		return out
	}
	if m, ok := n.members.Get(leader); ok {
		for _, id := range m.Meta.GetUnreachable() {
			if id != n.cfg.NodeID {
				out[id] = true
			}
		}
	}
	return out
}

// publishReach keeps the node's gossiped metadata's unreachable list equal
// to whom raft does not reach, while it leads (empty otherwise).
func (n *Node) publishReach() {
	defer n.wg.Done()
	t := time.NewTicker(reachPublishInterval)
	defer t.Stop()
	var published []string
	for {
		select {
		case <-t.C:
		case <-n.closing:
			return
		}
		now := n.unreachable()
		if len(now) > maxGossipedUnreachable {
			now = now[:maxGossipedUnreachable]
		}
		if slices.Equal(now, published) {
			continue
		}
		// The update waits, at most a second, for the change to be
		// broadcast; the next tick tries again if it fails.
		if err := n.gossip.SetUnreachable(now); err != nil {
			n.log.Debug("gossip the unreachable servers", "err", err)
			continue
		}
		published = now
	}
}

// unreachedAfter is how long a server may leave the leader's raft RPCs
// unanswered before operators see it suspect: a few of the heartbeats the
// leader sends every HeartbeatTimeout/10, well before NodeDownAfter.
func (n *Node) unreachedAfter() time.Duration {
	return max(n.cfg.HeartbeatTimeout/3, n.cfg.NodeDownAfter/8)
}
