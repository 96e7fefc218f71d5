package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/cluster/group"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// The groups this node knows, as the operator surfaces (the management
// API, raftmqctl, the metrics and health checks) read them, and the
// changes of membership and leadership they ask for. A node runs the
// metadata group (group.DefaultID), which holds every queue, and the queue
// groups the metadata log names with it as a member (queue_groups.go);
// the surfaces list each of them. A queue group's members are the log's
// (fsm GroupMembers): grow and shrink change the metadata group's raft
// configuration, and a queue group's members through the log, which the
// group's leader then follows (queue_steer.go).

// MetadataGroupName is the name the surfaces show for the default group
// (group.DefaultID, whose id is empty): the metadata group of the queue
// groups' plan, which holds every queue until queue groups exist.
const MetadataGroupName = "metadata"

// GroupName is the name the surfaces show for group id.
func GroupName(id string) string {
	if id == group.DefaultID {
		return MetadataGroupName
	}
	return id
}

// GroupMember is one server of a group's raft configuration.
type GroupMember struct {
	ID    string
	Voter bool
	// Online: this node, or a member gossip sees alive and the leader's
	// raft has not reported unreachable (Members' health alive, or
	// unknown to gossip but not suspect).
	Online bool
}

// GroupStatus is one Raft group as this node knows it.
type GroupStatus struct {
	// ID is the group's id (group.DefaultID for the metadata group); Name
	// what the surfaces show (GroupName).
	ID, Name string
	// Members are the servers of the group's configuration, by id.
	Members []GroupMember
	// Leader is the id of the group's leader this node knows ("" for
	// none); State this node's raft state in the group.
	Leader, State string
	Term          uint64
	CommitIndex   uint64
	LastApplied   uint64
	LastLogIndex  uint64
	SnapshotIndex uint64
	// Segments is the number of files of this node's log of the group
	// (group.Storage.Segments).
	Segments int
	// CommitLatency is the last entry's time from proposal to commit
	// measured by this node while it led the group (0 if it never did).
	CommitLatency time.Duration
	// TargetSize is how many voters the group should have: every member
	// of the cluster for the metadata group, the members the log names
	// for a queue group.
	TargetSize int
	// Far: this node does not run the group (FarGroups); its members are
	// the log's and its leader what gossip tells.
	Far bool
}

// Voters are the ids of the group's voters, sorted.
func (g GroupStatus) Voters() []string {
	var out []string
	for _, m := range g.Members {
		if m.Voter {
			out = append(out, m.ID)
		}
	}
	return out
}

// OnlineVoters are the ids of the group's voters that are online, sorted.
func (g GroupStatus) OnlineVoters() []string {
	var out []string
	for _, m := range g.Members {
		if m.Voter && m.Online {
			out = append(out, m.ID)
		}
	}
	return out
}

// HasVoter reports whether id is one of the group's voters.
func (g GroupStatus) HasVoter(id string) bool { return slices.Contains(g.Voters(), id) }

// Groups lists the groups this node runs, by id: the metadata group
// first (its id is empty), then its queue groups.
func (n *Node) Groups() []GroupStatus {
	qgs := n.runningQueueGroups()
	size := map[string]int{}
	n.View(func(m *fsm.Machine) {
		for _, g := range m.QueueGroups() {
			size[g.ID] = len(g.Members)
		}
	})
	out := make([]GroupStatus, 0, 1+len(qgs))
	out = append(out, n.groupStatus(group.DefaultID, n.group, 0))
	for _, qg := range qgs {
		out = append(out, n.groupStatus(qg.id, qg.g, max(size[qg.id], 1)))
	}
	return out
}

// leading is group id, which this node must lead to change its
// membership or leadership.
func (n *Node) leading(id string) (*group.Group, error) {
	g := n.group
	if id != group.DefaultID {
		qg := n.queueGroup(id)
		if qg == nil {
			return nil, fmt.Errorf("%w: %q", ErrNoSuchGroup, id)
		}
		g = qg.g
	}
	if g.Raft().State() != raft.Leader {
		return nil, ErrNotGroupLeader
	}
	return g, nil
}

// groupStatus is g as this node sees it; target is its TargetSize, 0 for
// every member of the cluster.
func (n *Node) groupStatus(id string, g *group.Group, target int) GroupStatus {
	r := g.Raft()
	st := r.Stats()
	u := func(k string) uint64 {
		v, _ := strconv.ParseUint(st[k], 10, 64)
		return v
	}
	gs := GroupStatus{ID: id, Name: GroupName(id), State: st["state"], Term: u("term"),
		CommitIndex: u("commit_index"), LastApplied: u("applied_index"), LastLogIndex: u("last_log_index"),
		SnapshotIndex: u("last_snapshot_index"), Segments: g.Storage().Segments(),
		CommitLatency: g.Batcher().CommitLatency()}
	_, leader := r.LeaderWithID()
	gs.Leader = string(leader)
	online, members := n.onlineMembers()
	gs.TargetSize = members
	if target > 0 {
		gs.TargetSize = target
	}
	if f := r.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			gs.Members = append(gs.Members, GroupMember{ID: string(s.ID), Voter: s.Suffrage == raft.Voter, Online: online[string(s.ID)]})
		}
	}
	slices.SortFunc(gs.Members, func(a, b GroupMember) int { return strings.Compare(a.ID, b.ID) })
	return gs
}

// onlineMembers are the cluster's members by id, true for those online:
// this node, and those gossip finds alive, or does not know but raft
// holds and nobody suspects (Members); members is how many have not
// left.
func (n *Node) onlineMembers() (online map[string]bool, members int) {
	online = map[string]bool{}
	for _, m := range n.Members() {
		online[m.ID] = m.ID == n.cfg.NodeID || m.Health == HealthAlive || m.Health == ""
		if m.Health != HealthLeft {
			members++
		}
	}
	return online, members
}

// Errors of the membership changes, as RabbitMQ's rabbitmq-queues words
// them where it has the case.
var (
	// ErrLastMember: the node is the group's only voter.
	ErrLastMember = errors.New("the last node cannot be removed")
	// ErrQuorumCritical: without the node, the group's online voters
	// would be fewer than a majority of the voters left.
	ErrQuorumCritical = errors.New("removing this member would leave fewer online members than a quorum")
	// ErrNotGroupLeader: only a group's leader changes its membership
	// or hands over its leadership.
	ErrNotGroupLeader = errors.New("this node does not lead the group")
	// ErrShrinkLeader: the node to remove leads the group. The removal
	// is held by the leader that makes it (reconcile adds alive members
	// back), so the next leader would undo it: hand the leadership over
	// first.
	ErrShrinkLeader = errors.New("the node leads the group: transfer its leadership first")
)

// GroupChange is the outcome of growing or shrinking one group.
type GroupChange struct {
	Group string // the group's id
	// Size is the number of voters after the change (before it, when it
	// failed).
	Size int
	Err  error
}

// GrowGroups adds the node id as a voter to the metadata group when it is
// not one and the group has fewer voters than its target size, and as a
// member to each queue group of which it is not one and that has fewer
// than fsm.MaxGroupMembers (through the log: GroupMembers); with even,
// only to the groups whose number of voters (members) is even
// (rabbitmq-queues grow's strategies all and even). It runs on the
// metadata leader.
func (n *Node) GrowGroups(ctx context.Context, id string, even bool) ([]GroupChange, error) {
	addr := ""
	for _, m := range n.Members() {
		if m.ID == id && m.Health != HealthLeft {
			addr = m.RaftAddr
		}
	}
	if addr == "" {
		return nil, fmt.Errorf("cluster: node %q is not a member of the cluster", id)
	}
	// A shrink no longer holds: the spreads may name the node again.
	n.shrunk.Delete(id)
	var out []GroupChange
	for _, gs := range n.Groups() {
		if gs.ID != group.DefaultID {
			continue // a queue group's members are the log's
		}
		voters := len(gs.Voters())
		if gs.HasVoter(id) || voters >= gs.TargetSize || (even && voters%2 != 0) {
			continue
		}
		c := GroupChange{Group: gs.ID, Size: voters}
		if err := n.addGroupVoter(ctx, gs.ID, id, addr); err != nil {
			c.Err = err
		} else {
			c.Size++
		}
		out = append(out, c)
	}
	return append(out, n.changeQueueGroups(ctx, func(g fsm.QueueGroup) ([]fsm.GroupMember, error) {
		if g.HasMember(id) || len(g.Members) >= fsm.MaxGroupMembers || (even && len(g.Members)%2 != 0) {
			return nil, nil
		}
		voters := n.metadataVoters()
		i := slices.IndexFunc(voters, func(v fsm.GroupMember) bool { return v.ID == id })
		if i < 0 {
			return nil, fmt.Errorf("cluster: node %q is not a voter of the metadata group", id)
		}
		return append(slices.Clone(g.Members), voters[i]), nil
	})...), nil
}

// changeQueueGroups sets, through the log, the members change gives each
// queue group the log holds (nil: unchanged) and lists the outcome per
// group changed. A change worked out from a group another change moved
// on (the spread, racing it) is worked out again. The log must be at
// fsm.GroupMembersLevel.
func (n *Node) changeQueueGroups(ctx context.Context, change func(fsm.QueueGroup) ([]fsm.GroupMember, error)) []GroupChange {
	var level uint32
	var groups []fsm.QueueGroup
	n.View(func(m *fsm.Machine) { level, groups = m.ProtocolLevel(), m.QueueGroups() })
	if level < fsm.GroupMembersLevel {
		return nil
	}
	var out []GroupChange
	for _, g := range groups {
		for tries := 0; ; tries++ {
			ms, err := change(g)
			if ms == nil && err == nil {
				break // nothing to change
			}
			c := GroupChange{Group: g.ID, Size: len(g.Members), Err: err}
			if err == nil {
				res, err := n.Submit(ctx, fsm.GroupMembersCommand(fsm.QueueGroup{ID: g.ID, Members: ms, Epoch: g.Epoch}))
				switch {
				case err != nil:
					c.Err = err
				case res.GetCode() != 0:
					c.Err = &refusedError{res}
				default:
					c.Size = len(ms)
				}
			}
			if errors.Is(c.Err, ErrOutcomeUnknown) && tries < 3 {
				// The metadata leader changed under the proposal: the
				// log says whether it committed once a Tick proposed
				// now has applied here.
				if _, err := n.Submit(ctx, &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}); err == nil {
					next := n.queueGroupSpec(g.ID)
					if next.Epoch == g.Epoch+1 && slices.Equal(next.Members, ms) {
						c.Err, c.Size = nil, len(ms)
						out = append(out, c)
						break
					}
					g = next
					continue
				}
			}
			if next := n.queueGroupSpec(g.ID); c.Err != nil && tries < 3 && next.Epoch != g.Epoch {
				g = next // moved on under the change: work it out again
				continue
			}
			out = append(out, c)
			break
		}
	}
	return out
}

// ShrinkGroups removes the node id from the members of every queue group
// it is one of, as rabbitmq-queues shrink removes a node's replicas,
// except where it is the last member or where the other online members
// would be fewer than a majority of the members left (that group would
// stop). It runs on the metadata leader; a queue group's members change
// through the log (GroupMembers), and a queue group's leader that is
// removed hands its leadership over first. Where the log has queue
// groups, the node stays a voter of the metadata group and serves its
// clients, and the spreads of the members leave it out (roster.shrunk);
// where it has none, every queue lives in the metadata group, and the
// node leaves its voters, unless it leads it (ErrShrinkLeader) or the
// same two refusals apply.
func (n *Node) ShrinkGroups(ctx context.Context, id string) ([]GroupChange, error) {
	var queueGroups bool
	n.View(func(m *fsm.Machine) {
		queueGroups = m.ProtocolLevel() >= fsm.GroupMembersLevel && len(m.QueueGroups()) > 0
	})
	voter := slices.ContainsFunc(n.metadataVoters(), func(v fsm.GroupMember) bool { return v.ID == id })
	if queueGroups && voter {
		// Before the changes, so that no spread racing them names the
		// node again.
		n.shrunk.Store(id, n.removedBoot(id))
	}
	queues := n.changeQueueGroups(ctx, func(g fsm.QueueGroup) ([]fsm.GroupMember, error) {
		if !g.HasMember(id) {
			return nil, nil
		}
		online := 0
		for _, m := range g.Members {
			if m.ID != id && (m.ID == n.cfg.NodeID || n.isOnline(m.ID)) {
				online++
			}
		}
		switch {
		case len(g.Members) == 1:
			return nil, ErrLastMember
		case online < (len(g.Members)-1)/2+1:
			return nil, ErrQuorumCritical
		}
		return slices.DeleteFunc(slices.Clone(g.Members), func(m fsm.GroupMember) bool { return m.ID == id }), nil
	})
	if queueGroups {
		if len(queues) > 0 && !slices.ContainsFunc(queues, func(c GroupChange) bool { return c.Err == nil }) {
			// Refused everywhere: a spread must not do what shrink
			// refused.
			n.shrunk.Delete(id)
		}
		return queues, nil
	}
	var out []GroupChange
	for _, gs := range n.Groups() {
		if gs.ID != group.DefaultID || !gs.HasVoter(id) {
			continue
		}
		voters, online := len(gs.Voters()), 0
		for _, v := range gs.OnlineVoters() {
			if v != id {
				online++
			}
		}
		c := GroupChange{Group: gs.ID, Size: voters}
		switch {
		case voters == 1:
			c.Err = ErrLastMember
		case online < (voters-1)/2+1:
			c.Err = ErrQuorumCritical
		case gs.Leader == id:
			c.Err = ErrShrinkLeader
		default:
			if err := n.removeGroupVoter(ctx, gs.ID, id); err != nil {
				c.Err = err
			} else {
				c.Size--
			}
		}
		out = append(out, c)
	}
	return append(out, queues...), nil
}

// RebalanceGroups moves the leadership of groups so that each online
// node leads its share of them. On the metadata leader it first spreads
// the queue groups' members and would-be leaders over the voters
// (spreadQueueGroups, whatever the voters were at the last spread).
// Each queue group this node leads is then handed at once to the member
// meant to lead it (the first of the log's members), when online: what
// each group's leader does by itself after LeadershipBalanceAfter
// (steerQueueGroup). The metadata group, when this node leads it and
// leads more than its share (the number of groups over the online
// voters, rounded up), is handed to the online voter of it that leads
// the fewest, unless this leader holds a shrink that a new one would not
// know of (holdsShrinks). It returns how many groups each node leads
// afterwards, as far as this node knows. Only a group's leader hands its
// leadership over: a group led by another node is left to it.
func (n *Node) RebalanceGroups(ctx context.Context) (map[string]int, error) {
	if n.IsLeader() {
		var last string
		if err := n.spreadQueueGroups(ctx, &last, true); err != nil {
			return nil, err
		}
	}
	if err := n.handBackQueueGroups(ctx); err != nil {
		return nil, err
	}
	groups := n.Groups()
	led := map[string]int{}
	nodes := map[string]bool{}
	for _, gs := range groups {
		for _, v := range gs.OnlineVoters() {
			nodes[v] = true
		}
		if gs.Leader != "" {
			led[gs.Leader]++
		}
	}
	if len(nodes) == 0 {
		return led, nil
	}
	share := (len(groups) + len(nodes) - 1) / len(nodes)
	if gs := groups[0]; gs.Leader == n.cfg.NodeID && led[gs.Leader] > share && !n.holdsShrinks() {
		to := ""
		for _, v := range gs.OnlineVoters() {
			if v != gs.Leader && (to == "" || led[v] < led[to]) {
				to = v
			}
		}
		if to != "" && led[to]+1 <= share {
			if err := n.transferGroupLeadership(ctx, gs.ID, to); err != nil {
				return led, err
			}
			led[gs.Leader]--
			led[to]++
		}
	}
	for id := range nodes {
		if _, ok := led[id]; !ok {
			led[id] = 0
		}
	}
	return led, nil
}

// holdsShrinks reports whether this node, as the metadata leader, holds
// an operator's shrink of a voter (roster.shrunk), which a new leader
// would not know of: rebalance leaves the metadata group with it.
func (n *Node) holdsShrinks() bool {
	return len(n.placementVoters()) < len(n.metadataVoters())
}

// handBackQueueGroups hands each queue group this node leads, and whose
// log names another member first, to that member when it is online and
// a voter of the group.
func (n *Node) handBackQueueGroups(ctx context.Context) error {
	for _, qg := range n.runningQueueGroups() {
		r := qg.g.Raft()
		if r.State() != raft.Leader {
			continue
		}
		spec := n.queueGroupSpec(qg.id)
		if len(spec.Members) == 0 || spec.Members[0].ID == n.cfg.NodeID {
			continue
		}
		f := r.GetConfiguration()
		if f.Error() != nil {
			continue
		}
		to := n.leaderFor(fsm.QueueGroup{Members: spec.Members[:1]}, f.Configuration().Servers, "")
		if to == "" {
			continue
		}
		if err := n.transferGroupLeadership(ctx, qg.id, to); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) addGroupVoter(ctx context.Context, gid, id, addr string) error {
	g, err := n.leading(gid)
	if err != nil {
		return err
	}
	r := g.Raft()
	// An operator's removal no longer holds: reconcile may keep it in.
	n.removed.Delete(id)
	if err := n.await(ctx, r.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, n.cfg.LeaderWait)); err != nil {
		return group.MapRaftError(err)
	}
	return nil
}

func (n *Node) removeGroupVoter(ctx context.Context, gid, id string) error {
	g, err := n.leading(gid)
	if err != nil {
		return err
	}
	r := g.Raft()
	// Reconcile adds alive members as voters of the metadata group: the
	// removal holds while the node runs the boot it runs now, or until
	// it is grown back (roster.removed).
	n.removed.Store(id, n.removedBoot(id))
	if err := n.await(ctx, r.RemoveServer(raft.ServerID(id), 0, n.cfg.LeaderWait)); err != nil {
		n.removed.Delete(id)
		return group.MapRaftError(err)
	}
	return nil
}

func (n *Node) transferGroupLeadership(ctx context.Context, gid, id string) error {
	g, err := n.leading(gid)
	if err != nil {
		return err
	}
	srv, ok := configServer(g.Raft(), id)
	if !ok {
		return fmt.Errorf("cluster: node %q is not in the group's configuration", id)
	}
	if err := n.await(ctx, g.TransferLeadership(srv.ID, srv.Address)); err != nil {
		return group.MapRaftError(err)
	}
	return nil
}
