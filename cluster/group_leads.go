package cluster

import (
	"slices"
	"strings"
	"time"

	gproto "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/cluster/membership"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// A node that does not run a queue group (five nodes and more, groups of
// three) still shows the group's members and leader for its queues: the
// management API's leader, members and online, raftmqctl list_queues,
// the health check of groups without a leader. The members are the
// metadata log's; who leads, each node gossips for the groups it leads
// (NodeMeta.leads, with the term), and a node believes the alive member
// that claims the group in the highest term. No request asks another
// node: a page of queues must not wait for a member that does not
// answer.

// leadsChanged has the node gossip the queue groups it leads now; it
// does not wait.
func (n *Node) leadsChanged() {
	select {
	case n.leadsKick <- struct{}{}:
	default:
	}
}

// gossipLeads gossips, at each leadsChanged, the queue groups this node
// leads, until the node closes.
func (n *Node) gossipLeads() {
	defer n.wg.Done()
	var last []*proto.GroupLead
	for {
		select {
		case <-n.leadsKick:
		case <-n.closing:
			return
		}
		leads := n.leads()
		if slices.EqualFunc(leads, last, func(a, b *proto.GroupLead) bool { return gproto.Equal(a, b) }) {
			continue
		}
		if err := n.gossip.SetLeads(leads, time.Second); err != nil {
			n.log.Debug("gossip the groups this node leads", "err", err)
		}
		last = leads
	}
}

// leads are the queue groups this node leads, past their term's barrier,
// by id.
func (n *Node) leads() []*proto.GroupLead {
	var out []*proto.GroupLead
	for _, qg := range n.runningQueueGroups() {
		if qg.leading.Load() {
			out = append(out, &proto.GroupLead{Group: qg.id, Term: qg.g.Raft().CurrentTerm()})
		}
	}
	return out
}

// FarGroups lists the queue groups the metadata log names that this
// node does not run, by id, as it knows them without asking their
// members: the members the log names, online as gossip sees them, and
// as leader the member gossip finds alive that claims the group in the
// highest term ("" when none does). Their raft figures are zero; Far is
// set.
func (n *Node) FarGroups() []GroupStatus {
	running := n.RunningQueueGroups()
	var named []fsm.QueueGroup
	n.View(func(m *fsm.Machine) { named = m.QueueGroups() })
	online, _ := n.onlineMembers()
	all := n.members.All()
	var out []GroupStatus
	for _, g := range named {
		if slices.Contains(running, g.ID) {
			continue
		}
		gs := GroupStatus{ID: g.ID, Name: GroupName(g.ID), Far: true, TargetSize: len(g.Members)}
		for _, m := range g.Members {
			gs.Members = append(gs.Members, GroupMember{ID: m.ID, Voter: true, Online: online[m.ID]})
		}
		gs.Leader, gs.Term = gossipedLeader(g, all)
		slices.SortFunc(gs.Members, func(a, b GroupMember) int { return strings.Compare(a.ID, b.ID) })
		out = append(out, gs)
	}
	return out
}

// gossipedLeader is the member of g that gossip finds alive and that
// claims to lead g in the highest term, with that term ("", 0: none
// does). A leader cut off or frozen keeps its old claim until gossip
// finds it dead, but its successor claims a higher term.
func gossipedLeader(g fsm.QueueGroup, all map[string]membership.Member) (id string, term uint64) {
	for _, m := range g.Members {
		mm, ok := all[m.ID]
		if !ok || mm.Health != HealthAlive {
			continue
		}
		for _, l := range mm.Meta.GetLeads() {
			if l.GetGroup() == g.ID && l.GetTerm() > term {
				id, term = m.ID, l.GetTerm()
			}
		}
	}
	return id, term
}
