package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/raftmq/raftmq/cluster/group"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// errRemoteDropped is what a dropped remote submitter's Leader answers,
// before anything is sent: the node now runs the group, or the log no
// longer names it, and SubmitGroup looks again.
var errRemoteDropped = errors.New("cluster: the group's remote submitter was dropped")

// remoteGroup is the way into the log of a queue group this node does
// not run but the metadata log names: its commands are forwarded to the
// group's leader (group.Forwarder, the group's id on the stream), which
// the node finds without running the group's raft. The target is the
// leader a refusal last named (group.LeaderHint), else the group's
// members in the log's order from the first (the one meant to lead),
// the next one after each refusal that names none. A batch returns once
// the group committed it: nothing applies it here.
type remoteGroup struct {
	id  string
	n   *Node
	fwd *group.Forwarder
	sub *group.Submitter

	mu      sync.Mutex
	hint    string   // the leader a refusal named, "" for none
	fresh   bool     // hint is new since the last target: go to it at once
	members []string // the group's members, as the last target saw them
	next    int      // the member to try when there is no hint
	// gossiped is the highest term in which gossip named the group's
	// leader: each newer claim steers the submits once.
	gossiped uint64
	dropped  bool // no more submits: SubmitGroup looks again
	active   sync.WaitGroup
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// newRemoteGroup returns the remote submitter of group id.
func (n *Node) newRemoteGroup(id string) *remoteGroup {
	r := &remoteGroup{id: id, n: n}
	r.fwd = group.NewForwarder(group.ForwarderConfig{Group: id, Dial: n.dialInternal,
		MaxCommands: n.cfg.MaxBatchCommands, MaxBytes: n.cfg.MaxBatchBytes})
	r.sub = group.NewSubmitter(group.SubmitterConfig{
		LeaderWait: n.cfg.LeaderWait,
		Leader:     r.leader,
		Changed:    r.changed,
		Forwarder:  r.fwd,
		Closing:    n.closing,
		Refused:    r.refused,
	})
	return r
}

// submitRemote submits cmds to group id, which this node does not run,
// through its remote submitter, created on first use; it returns
// errRemoteDropped when that submitter was dropped before anything was
// sent, and ErrNoSuchGroup when the metadata log names no group id.
func (n *Node) submitRemote(ctx context.Context, id string, cmds []*proto.Command) ([]*proto.Result, error) {
	named := false
	n.View(func(m *fsm.Machine) {
		named = slices.ContainsFunc(m.QueueGroups(), func(s fsm.QueueGroup) bool { return s.ID == id })
	})
	if !named {
		return nil, fmt.Errorf("%w: %q", ErrNoSuchGroup, id)
	}
	n.qmu.Lock()
	if n.qclosed {
		n.qmu.Unlock()
		return nil, ErrClosed
	}
	if n.byID[id] != nil {
		// It opened since the caller looked.
		n.qmu.Unlock()
		return nil, errRemoteDropped
	}
	r := n.remote[id]
	if r == nil {
		if n.remote == nil {
			n.remote = map[string]*remoteGroup{}
		}
		r = n.newRemoteGroup(id)
		n.remote[id] = r
		select {
		case n.remoteAdded <- struct{}{}:
		default:
		}
	}
	n.qmu.Unlock()
	if !r.acquire() {
		return nil, errRemoteDropped
	}
	defer r.active.Done()
	return r.sub.SubmitBatch(ctx, cmds)
}

// acquire counts a submit in, unless r was dropped.
func (r *remoteGroup) acquire() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dropped {
		return false
	}
	r.active.Add(1)
	return true
}

// drop stops r taking submits; those under way end (each goes on to
// the group's leader, or finds r dropped before it sends again).
func (r *remoteGroup) drop() {
	r.mu.Lock()
	r.dropped = true
	r.mu.Unlock()
}

// leader returns where r's commands go now (group.SubmitterConfig.Leader):
// the leader a refusal named, else the members in turn, one gossip
// reports alive first; it waits until deadline for one whose gRPC
// address gossip knows.
func (r *remoteGroup) leader(ctx context.Context, deadline time.Time) (group.Target, error) {
	n := r.n
	for {
		var spec fsm.QueueGroup
		named := false
		n.View(func(m *fsm.Machine) {
			for _, s := range m.QueueGroups() {
				if s.ID == r.id {
					spec, named = s, true
				}
			}
		})
		r.mu.Lock()
		if r.dropped {
			r.mu.Unlock()
			return group.Target{}, errRemoteDropped
		}
		if !named {
			r.mu.Unlock()
			return group.Target{}, fmt.Errorf("%w: %q", ErrNoSuchGroup, r.id)
		}
		r.members = r.members[:0]
		for _, m := range spec.Members {
			if m.ID != n.cfg.NodeID {
				r.members = append(r.members, m.ID)
			}
		}
		hint, start := r.hint, r.next
		r.fresh = false
		members := slices.Clone(r.members)
		r.mu.Unlock()
		addr := func(id string, alive bool) string {
			m, ok := n.members.Get(id)
			if !ok || alive && m.Health != HealthAlive {
				return ""
			}
			return m.Meta.GetGrpcAddr()
		}
		if hint != "" && hint != n.cfg.NodeID {
			if a := addr(hint, false); a != "" {
				return group.Target{ID: hint, Addr: a}, nil
			}
		}
		for _, alive := range []bool{true, false} {
			for i := range members {
				id := members[(start+i)%len(members)]
				if a := addr(id, alive); a != "" {
					return group.Target{ID: id, Addr: a}, nil
				}
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			return group.Target{}, ErrNoLeader
		}
		t := time.NewTimer(min(left, 100*time.Millisecond))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return group.Target{}, ctx.Err()
		case <-n.closing:
			t.Stop()
			return group.Target{}, ErrClosed
		}
	}
}

// refused hears that target refused a try with nothing appended
// (group.SubmitterConfig.Refused): the next try goes to the leader the
// refusal names, else to the member after target.
func (r *remoteGroup) refused(target group.Target, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h := group.LeaderHint(err); h != "" {
		// A leader not ready yet names itself: it is tried again after
		// a pause.
		r.fresh = h != target.ID
		r.hint = h
		return
	}
	r.hint = ""
	if i := slices.Index(r.members, target.ID); i >= 0 {
		r.next = i + 1
	} else {
		r.next++
	}
	if len(r.members) > 0 {
		r.next %= len(r.members)
	}
}

// changed is closed at once when a refusal just named a new leader, so
// the next try goes to it; otherwise the submitter's pause decides.
func (r *remoteGroup) changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fresh {
		return closedChan
	}
	return nil
}

// steerRemoteGroups runs until the node closes: whenever gossip changes
// (a member's claim to lead, its health, the metadata leader's list of
// servers it does not reach), when a remote submitter is made, and,
// while the node has any, a few times a second for the time that makes
// a server unreached, it points each remote submitter at the leader its
// group's members gossip and retires its streams to members that no
// longer answer. A node that runs every group it serves (three nodes,
// groups of three) has none, and is not woken for them.
func (n *Node) steerRemoteGroups() {
	defer n.wg.Done()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		wait := n.changed.Wait()
		n.followGossipedLeaders()
		n.retireUnreached()
		var ticks <-chan time.Time
		if len(n.remoteGroups()) > 0 {
			ticks = tick.C
		}
		select {
		case <-wait:
		case <-ticks:
		case <-n.remoteAdded:
		case <-n.closing:
			return
		}
	}
}

// remoteGroups are the node's remote submitters now.
func (n *Node) remoteGroups() []*remoteGroup {
	n.qmu.Lock()
	defer n.qmu.Unlock()
	rs := make([]*remoteGroup, 0, len(n.remote))
	for _, r := range n.remote {
		rs = append(rs, r)
	}
	return rs
}

// followGossipedLeaders sends each remote submitter's commands to the
// leader its group's members gossip, once per newer term: a member
// hears of an election from raft, a node outside the group from a
// refusal, which a frozen or cut-off leader never sends, or from the new
// leader's gossip, which comes within a gossip round of the election.
// What is in flight to the old leader ends as outcome unknown
// (group.Forwarder.LeaderChanged) and is resolved from the log.
func (n *Node) followGossipedLeaders() {
	rs := n.remoteGroups()
	if len(rs) == 0 {
		return
	}
	var named []fsm.QueueGroup
	n.View(func(m *fsm.Machine) { named = m.QueueGroups() })
	all := n.members.All()
	for _, r := range rs {
		i := slices.IndexFunc(named, func(g fsm.QueueGroup) bool { return g.ID == r.id })
		if i < 0 {
			continue
		}
		if id, term := gossipedLeader(named[i], all); id != "" && id != n.cfg.NodeID {
			r.gossipedLeader(id, term)
		}
	}
}

// gossipedLeader steers r to id, which gossip says leads its group in
// term, unless an earlier call already did for this term or a later one.
func (r *remoteGroup) gossipedLeader(id string, term uint64) {
	r.mu.Lock()
	if term <= r.gossiped {
		r.mu.Unlock()
		return
	}
	r.gossiped = term
	if r.hint != id {
		r.hint, r.fresh = id, true
	}
	r.mu.Unlock()
	r.fwd.LeaderChanged(id)
}

// retireUnreached retires each remote submitter's stream to a leader
// gossip no longer reports alive, or the metadata leader's raft no longer
// reaches (suspect), and forgets it as a hint: a frozen leader sends no
// refusal, and its successor's gossip may not have come yet.
func (n *Node) retireUnreached() {
	rs := n.remoteGroups()
	if len(rs) == 0 {
		return
	}
	suspect := n.suspects()
	for _, r := range rs {
		r.mu.Lock()
		candidates := append([]string{r.hint}, r.members...)
		r.mu.Unlock()
		for _, id := range candidates {
			if id == "" {
				continue
			}
			if _, ok := n.answering(id, suspect); ok {
				continue
			}
			r.fwd.LeaderSuspect(id)
			r.mu.Lock()
			if r.hint == id {
				r.hint = ""
			}
			r.mu.Unlock()
		}
	}
}

// dropRemoteGroups drops the remote submitters of the groups this node
// runs and of those the metadata log no longer names (specs); each one's
// forwarder closes once the submits under way on it end.
func (n *Node) dropRemoteGroups(specs []fsm.QueueGroup) {
	n.qmu.Lock()
	var gone []*remoteGroup
	for id, r := range n.remote {
		named := slices.ContainsFunc(specs, func(s fsm.QueueGroup) bool { return s.ID == id })
		if n.byID[id] != nil || !named {
			delete(n.remote, id)
			gone = append(gone, r)
		}
	}
	n.qmu.Unlock()
	for _, r := range gone {
		r.drop()
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			r.active.Wait()
			r.fwd.Close()
		}()
	}
}

// closeRemoteGroups closes every remote submitter: the node is closing
// (n.closing is closed, so no submit waits long), and what is in flight
// fails as its forwarder's Close says.
func (n *Node) closeRemoteGroups() {
	n.qmu.Lock()
	n.qclosed = true
	rs := n.remote
	n.remote = nil
	n.qmu.Unlock()
	for _, r := range rs {
		r.drop()
		r.fwd.Close()
		r.active.Wait()
		// A try that found its target before the drop may have opened
		// a session since.
		r.fwd.Close()
	}
}
