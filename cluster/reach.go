package cluster

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// reach is what the leader's raft knows of the servers it replicates to:
// those whose heartbeats fail, since their last contact.
//
// Gossip alone decided NodeDown before, and gossip can miss a death: a
// node that dies and never comes back (its log cannot be opened) is
// forgotten by memberlist after a while, and a leader elected later never
// hears of it at all, so the consumers it had stay in the log holding
// their messages for good. Raft's leader heartbeats every server in the
// configuration whatever gossip says, and learns at once when a dead
// node's port refuses it.
type reach struct {
	mu      sync.Mutex
	failing map[string]time.Time // server id -> last contact
}

func newReach() *reach { return &reach{failing: map[string]time.Time{}} }

// reset forgets everything: a new term replicates afresh.
func (r *reach) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.failing)
}

func (r *reach) observe(o raft.Observation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch d := o.Data.(type) {
	case raft.FailedHeartbeatObservation:
		if _, ok := r.failing[string(d.PeerID)]; !ok {
			r.failing[string(d.PeerID)] = d.LastContact
		}
	case raft.ResumedHeartbeatObservation:
		delete(r.failing, string(d.PeerID))
	}
}

// unreachedSince returns when the leader last reached id, if its
// heartbeats fail now.
func (r *reach) unreachedSince(id string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.failing[id]
	return t, ok
}

// watchHeartbeats feeds raft's heartbeat observations into n.reach. They
// have their own observer, with room for a burst, so that a missed
// "resumed" does not leave a live server marked unreachable.
func (n *Node) watchHeartbeats(r *raft.Raft) {
	obs := make(chan raft.Observation, 256)
	r.RegisterObserver(raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation:
			return true
		}
		return false
	}))
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		for {
			select {
			case o := <-obs:
				n.reach.observe(o)
			case <-n.closing:
				return
			}
		}
	}()
}
