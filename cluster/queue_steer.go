package cluster

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// A queue group follows the cluster's nodes: the metadata log names its
// members (fsm GroupMembers), the metadata leader spreads them over the
// voters as the voters change (spreadQueueGroups), and each group's
// leader makes the group's raft configuration match and hands its
// leadership back to the member meant to lead it (steerQueueGroup).

// leadershipSettle is how long a leader that took a group while the
// member meant to lead it was online leads it before handing it over,
// the first time (steer.due); each hand-over after doubles it, up to
// Config.LeadershipBalanceAfter.
const leadershipSettle = 2 * time.Second

// steer is what a group's steering remembers between rounds.
type steer struct {
	ledSince    time.Time // this node leads the group since
	onlineSince time.Time // the member meant to lead is online since
	meant       string    // that member
	moved       time.Time // the last hand-over
	handed      int       // the hand-overs so far
}

// steerLoop runs the group's steering when asked, until the group
// closes: when this node became the leader, and at every round of
// runQueueGroups, which comes as the metadata log applies and every
// second at least, so the steering needs no ticker of its own. On a
// node no longer meant to run the group, a round asks the group's
// leader whether it removed the node (askDropped).
func (n *Node) steerLoop(qg *queueGroup) {
	defer qg.wg.Done()
	var st steer
	// again asks askDropped again before the next round: a removed
	// node learns it within a heartbeat timeout of its leader's silence.
	var again <-chan time.Time
	for {
		select {
		case <-qg.steer:
		case <-again:
		case <-qg.closing:
			return
		}
		ctx, cancel := n.untilClosed(context.Background())
		n.steerQueueGroup(ctx, qg, &st, time.Now())
		again = nil
		if n.askDropped(ctx, qg) {
			again = time.After(n.cfg.HeartbeatTimeout / 4)
		}
		cancel()
	}
}

// steerQueueGroup makes, on the group's leader, its raft configuration
// match the members the metadata log names: the members missing are
// added as voters, a leader that is no longer a member hands its
// leadership to one that is, and the servers that are not members are
// removed. Then, once the configuration matches, it hands the leadership
// back to the member meant to lead (the first) when that member has
// been online, and this node has led the group, for
// Config.LeadershipBalanceAfter, and the last hand-over is that long
// ago: a node that comes back gets its share of leaderships without a
// node that flaps taking them back and forth.
func (n *Node) steerQueueGroup(ctx context.Context, qg *queueGroup, st *steer, now time.Time) {
	r := qg.g.Raft()
	if !qg.leading.Load() || r.State() != raft.Leader {
		st.ledSince = time.Time{}
		return
	}
	if st.ledSince.IsZero() {
		st.ledSince = now
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return
	}
	servers := f.Configuration().Servers
	log := n.log.With("group", qg.id)
	if !n.metadataVoter() {
		// Removed from the metadata group, this node no longer learns
		// the log's members: hand the group to a voter of it that does.
		if to, ok := n.onlineVoter(qg.g); ok {
			if err := n.transferGroupLeadership(ctx, qg.id, string(to.ID)); err != nil {
				log.Warn("handing over a queue group as this node left the metadata group failed", "to", to.ID, "err", err)
			}
		}
		return
	}
	spec := n.queueGroupSpec(qg.id)
	if len(spec.Members) == 0 {
		return
	}
	if err := n.initQueueGroup(ctx, qg); err != nil {
		log.Warn("bringing the queue group's log to the metadata log's level failed", "err", err)
	}
	for _, m := range spec.Members {
		if slices.ContainsFunc(servers, func(s raft.Server) bool {
			return string(s.ID) == m.ID && string(s.Address) == m.Addr && s.Suffrage == raft.Voter
		}) {
			continue
		}
		if err := n.await(ctx, r.AddVoter(raft.ServerID(m.ID), raft.ServerAddress(m.Addr), 0, n.cfg.LeaderWait)); err != nil {
			log.Warn("adding a queue group member failed", "member", m.ID, "err", err)
			return
		}
		log.Info("added a queue group member", "member", m.ID)
	}
	if !spec.HasMember(n.cfg.NodeID) {
		to := n.leaderFor(spec, servers, "")
		if to == "" {
			return
		}
		if err := n.transferGroupLeadership(ctx, qg.id, to); err != nil {
			log.Warn("handing over a queue group this node is no longer a member of failed", "to", to, "err", err)
		}
		return
	}
	for _, s := range servers {
		if spec.HasMember(string(s.ID)) {
			continue
		}
		if err := n.await(ctx, r.RemoveServer(s.ID, 0, n.cfg.LeaderWait)); err != nil {
			log.Warn("removing a queue group member failed", "member", s.ID, "err", err)
			return
		}
		log.Info("removed a queue group member", "member", s.ID)
	}
	meant := spec.Members[0].ID
	if id, _ := n.Leader(); !st.due(now, n.cfg.LeadershipBalanceAfter, n.cfg.NodeID, meant, n.isOnline(meant)) || id == "" {
		return // not due, or the cluster is not steady: no metadata leader
	}
	if err := n.transferGroupLeadership(ctx, qg.id, meant); err != nil {
		log.Warn("handing a queue group's leadership back failed", "to", meant, "err", err)
		return
	}
	log.Info("handed a queue group's leadership back to the member meant to lead it", "to", meant)
}

// due reports whether a leader that has led since st.ledSince is to hand
// the leadership to meant now: meant is another node, online (as seen
// at each round) for wait without a break, this node has led for wait,
// and its last hand-over is wait ago. It records a hand-over when due.
//
// A leader that took the group while meant was online waits less: the
// settle (leadershipSettle) the first time, twice as long at each
// hand-over after, up to wait.
func (st *steer) due(now time.Time, wait time.Duration, self, meant string, online bool) bool {
	if meant != st.meant || !online {
		st.meant, st.onlineSince = meant, time.Time{}
	}
	if online && st.onlineSince.IsZero() {
		st.onlineSince = now
	}
	if meant == self || !online {
		return false
	}
	hold := wait
	if !st.onlineSince.After(st.ledSince) {
		// Meant was online when this node took the group (a new group's
		// first election, a transfer meant did not win, meant's raft
		// stalled while its node stayed up): nothing came back that
		// could flap, so the group goes to meant once the leadership
		// settled, not a whole wait later; a new cluster's leaders
		// spread within seconds, and a transfer lost on a loaded machine
		// is tried again. A group that keeps coming back, meant unable
		// to hold it, is handed over ever more seldom.
		hold = min(wait, leadershipSettle<<min(st.handed, 16))
	}
	if now.Sub(st.onlineSince) < hold || now.Sub(st.ledSince) < hold || now.Sub(st.moved) < hold {
		return false
	}
	st.moved = now
	st.handed++
	return true
}

// initQueueGroup brings, on the group's leader, the group's log to the
// metadata log's protocol level (SetProtocol: every server announced it
// before the metadata log took it) and gives it its number (GroupInit),
// the group's position in the metadata log's groups from 1, the metadata
// group being 0: the number that names it in hand-offs between groups,
// the same on every replica since QueueGroups only adds. It proposes
// nothing once both hold, and each is applied once whoever proposes it:
// a level is only raised, and a log keeps its first number.
func (n *Node) initQueueGroup(ctx context.Context, qg *queueGroup) error {
	var meta uint32
	num := -1
	n.View(func(m *fsm.Machine) {
		meta = m.ProtocolLevel()
		num = slices.IndexFunc(m.QueueGroups(), func(g fsm.QueueGroup) bool { return g.ID == qg.id })
	})
	var level, id uint32
	qg.g.State().View(func(m *fsm.Machine) { level, id = m.ProtocolLevel(), m.Group() })
	var cmds []*proto.Command
	if level < meta {
		cmds = append(cmds, &proto.Command{Cmd: &proto.Command_SetProtocol{SetProtocol: &proto.SetProtocol{Level: meta}}})
	}
	if id == 0 && num >= 0 && max(level, meta) >= fsm.GroupsLevel {
		cmds = append(cmds, &proto.Command{Cmd: &proto.Command_GroupInit{GroupInit: &proto.GroupInit{Group: uint32(num + 1)}}})
	}
	if len(cmds) == 0 {
		return nil
	}
	res, err := qg.g.Submitter().SubmitBatch(ctx, cmds)
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.GetCode() != 0 {
			return &refusedError{r}
		}
	}
	n.log.Info("queue group's log at the metadata log's level", "group", qg.id, "level", meta, "number", num+1)
	return nil
}

// queueGroupSpec is the queue group id as the metadata log names it (no
// members when it names none).
func (n *Node) queueGroupSpec(id string) fsm.QueueGroup {
	var spec fsm.QueueGroup
	n.View(func(m *fsm.Machine) {
		if i := slices.IndexFunc(m.QueueGroups(), func(g fsm.QueueGroup) bool { return g.ID == id }); i >= 0 {
			spec = m.QueueGroups()[i]
		}
	})
	return spec
}

// metadataVoter reports whether this node is a voter of the metadata
// group as its configuration says, and, unless it leads, has heard from
// a leader within ten election timeouts since it first did: one that is
// not (removed, or not added yet) no longer learns the log, and is a
// member of no queue group whatever the log it holds says. The silence
// covers a removed node that never received the entry removing it (the
// leader's last send to it failed): its configuration still names it a
// voter, but no leader replicates to it any more.
func (n *Node) metadataVoter() bool {
	r := n.group.Raft()
	s, ok := configServer(r, n.cfg.NodeID)
	if !ok || s.Suffrage != raft.Voter {
		return false
	}
	last := r.LastContact()
	return r.State() == raft.Leader || last.IsZero() || time.Since(last) <= 10*n.cfg.ElectionTimeout
}

// leaderFor is the member of spec, other than not, that the group's
// leadership goes to: the first that is a voter of the configuration
// and online ("" for none).
func (n *Node) leaderFor(spec fsm.QueueGroup, servers []raft.Server, not string) string {
	for _, m := range spec.Members {
		if m.ID != n.cfg.NodeID && m.ID != not && n.isOnline(m.ID) && slices.ContainsFunc(servers, func(s raft.Server) bool {
			return string(s.ID) == m.ID && s.Suffrage == raft.Voter
		}) {
			return m.ID
		}
	}
	return ""
}

// isOnline reports whether gossip sees the member id alive.
func (n *Node) isOnline(id string) bool {
	for _, m := range n.Members() {
		if m.ID == id {
			return m.Health == HealthAlive
		}
	}
	return false
}

// spreadQueueGroups proposes, on the metadata leader at the level that
// knows GroupMembers, the queue groups' members spread over the voters
// but those shrunk out of the queue groups (fsm.SpreadGroups) whenever
// they differ from those it last spread them over (at the start of its
// term: none), or always with force (rebalance). A shrink's removal thus
// holds until grow, the shrunk node's restart, or the metadata
// leadership moves (roster.shrunk).
func (n *Node) spreadQueueGroups(ctx context.Context, last *string, force bool) error {
	var level uint32
	var groups []fsm.QueueGroup
	n.View(func(m *fsm.Machine) { level, groups = m.ProtocolLevel(), m.QueueGroups() })
	if level < fsm.GroupMembersLevel || len(groups) == 0 {
		return nil
	}
	voters := n.placementVoters()
	var b strings.Builder
	for _, v := range voters {
		b.WriteString(v.ID + "=" + v.Addr + " ")
	}
	if len(voters) == 0 || (!force && b.String() == *last) {
		return nil
	}
	var cmds []*proto.Command
	for _, g := range fsm.SpreadGroups(groups, voters) {
		cmds = append(cmds, fsm.GroupMembersCommand(g))
	}
	if len(cmds) > 0 {
		res, err := n.SubmitBatch(ctx, cmds)
		if err != nil {
			n.log.Warn("spreading the queue groups failed", "err", err)
			return err
		}
		for _, r := range res {
			if r.GetCode() != 0 {
				n.log.Warn("queue group members refused", "code", r.GetCode(), "text", r.GetText())
				return &refusedError{r}
			}
		}
		n.log.Info("spread the queue groups over the voters", "voters", len(voters), "changed", len(cmds))
	}
	*last = b.String()
	return nil
}

// refusedError is a command the log refused.
type refusedError struct{ r *proto.Result }

func (e *refusedError) Error() string { return e.r.GetText() }
