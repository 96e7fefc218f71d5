package cluster

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/cluster/group"
)

// HandOver hands the leadership of each group this node leads (the
// metadata group and its queue groups) to a voter of the group that it
// reaches (onlineVoter), all at once, waiting up to timeout; the node is
// about to stop. A stop is not a leave: the node stays a member, and
// its groups elect without it. But an election waits for the followers
// to find their leader silent (a heartbeat timeout and more), and every
// command of the group waits with it; a transfer has the new leader
// stand at once. A group with no such voter, or whose transfer fails,
// is left to elect as before. A transfer answers the commands in flight: raft
// refuses new entries meanwhile (not appended: their callers try the
// next leader) and brings the successor up to the leader's last entry
// before it stands, so those entries commit. A leader that stops
// without one breaks the streams forwarding other nodes' commands, whose
// outcome is then unknown.
func (n *Node) HandOver(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	type led struct {
		id string
		g  *group.Group
	}
	groups := []led{{group.DefaultID, n.group}}
	for _, qg := range n.runningQueueGroups() {
		groups = append(groups, led{qg.id, qg.g})
	}
	var wg sync.WaitGroup
	for _, l := range groups {
		if l.g.Raft().State() != raft.Leader {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			to, ok := n.awaitOnlineVoter(ctx, l.g)
			if !ok {
				return
			}
			log := n.log.With("group", l.id, "to", to.ID)
			if err := n.await(ctx, l.g.TransferLeadership(to.ID, to.Address)); err != nil {
				log.Warn("handing a group's leadership over before the stop failed: it elects without this node", "err", group.MapRaftError(err))
				return
			}
			log.Info("handed a group's leadership over before the stop")
		}()
	}
	wg.Wait()
}

// awaitOnlineVoter is onlineVoter, waited for up to a heartbeat timeout
// while this node leads g: a leader elected a moment ago has reached no
// follower yet, and raft's first heartbeats reach them within a tenth of
// that. It waits for nothing when the last try to reach each other voter
// failed (the last node of a cluster stopped node by node).
func (n *Node) awaitOnlineVoter(ctx context.Context, g *group.Group) (raft.Server, bool) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.HeartbeatTimeout)
	defer cancel()
	tick := time.NewTicker(n.cfg.HeartbeatTimeout / 50)
	defer tick.Stop()
	for {
		if s, ok := n.onlineVoter(g); ok || g.Raft().State() != raft.Leader || n.othersFailed(g) {
			return s, ok
		}
		select {
		case <-ctx.Done():
			return raft.Server{}, false
		case <-tick.C:
		}
	}
}

// othersFailed reports whether this node, leading g, failed to reach
// every other voter of g at its last try.
func (n *Node) othersFailed(g *group.Group) bool {
	f := g.Raft().GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) != n.cfg.NodeID && s.Suffrage == raft.Voter && !g.Failed(s.ID) {
			return false
		}
	}
	return true
}

// onlineVoter is a voter of g's configuration other than this node that
// this node, leading g, reached within a heartbeat timeout
// (group.Group.Reached) and that gossip finds alive. Gossip alone takes
// a second and more to find a stopped peer gone, and a transfer to it
// fails only after raft's transfer timeout; raft refuses a stopped
// peer's next heartbeat, a tenth of a heartbeat timeout after the stop.
func (n *Node) onlineVoter(g *group.Group) (raft.Server, bool) {
	f := g.Raft().GetConfiguration()
	if f.Error() != nil {
		return raft.Server{}, false
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) != n.cfg.NodeID && s.Suffrage == raft.Voter && g.Reached(s.ID) && n.isOnline(string(s.ID)) {
			return s, true
		}
	}
	return raft.Server{}, false
}
