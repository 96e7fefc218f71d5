package cluster

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/cluster/group"
)

// HandOver hands the leadership of each group this node leads (the
// metadata group and its queue groups) to an online voter of the group,
// all at once, waiting up to timeout; the node is about to stop. A stop
// is not a leave: the node stays a member, and its groups elect without
// it. But an election waits for the followers to find their leader
// silent (a heartbeat timeout and more), and every command of the
// group waits with it; a transfer has the new leader stand at once. A
// group with no other online voter, or whose transfer fails, is left to
// elect as before. Commands in flight on a leader that steps down fail
// either way ("leadership lost, outcome unknown").
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
		r := l.g.Raft()
		if r.State() != raft.Leader {
			continue
		}
		to, ok := n.onlineVoter(r)
		if !ok {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
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

// onlineVoter is a voter of r's configuration other than this node that
// gossip finds alive.
func (n *Node) onlineVoter(r *raft.Raft) (raft.Server, bool) {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return raft.Server{}, false
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) != n.cfg.NodeID && s.Suffrage == raft.Voter && n.isOnline(string(s.ID)) {
			return s, true
		}
	}
	return raft.Server{}, false
}
