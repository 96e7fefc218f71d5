package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/group"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// following is the configuration of the tests where queue groups follow
// the nodes: k queue groups, leaderships handed back after a second.
func following(k int) func(int, *cluster.Config) {
	return func(_ int, c *cluster.Config) {
		c.QueueGroups = k
		c.LeadershipBalanceAfter = time.Second
	}
}

// logGroups is the queue groups as n's metadata log names them.
func logGroups(n *cluster.Node) []fsm.QueueGroup {
	var gs []fsm.QueueGroup
	n.View(func(m *fsm.Machine) { gs = m.QueueGroups() })
	return gs
}

func sortedMembers(g fsm.QueueGroup) []string {
	var ids []string
	for _, m := range g.Members {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	return ids
}

// followed checks, once, that the queue groups follow the log on every
// live node that is a voter of the metadata group as its leader knows
// it (one that is not runs no queue group, though it may not know that
// it was removed): all name the same groups and members; a node runs a
// group if and only if it is one of its members; each group's members
// agree on a leader, which is the member the log names first (when led),
// and whose raft configuration's voters are the log's members. It
// returns how many groups each node leads.
func followed(c *clustertest.Cluster, ids []string, led bool) (map[string]int, error) {
	l := c.Leader()
	if l == nil {
		return nil, errors.New("no metadata leader")
	}
	var live []*cluster.Node
	for _, n := range c.Live() {
		if slices.Contains(voters(l), n.NodeID()) {
			live = append(live, n)
		} else if gs := n.Groups(); len(gs) != 1 {
			return nil, fmt.Errorf("%s, not a voter, runs %d groups", n.NodeID(), len(gs))
		}
	}
	want := logGroups(live[0])
	if len(want) != len(ids) {
		return nil, fmt.Errorf("%s's log names %d groups, want %d", live[0].NodeID(), len(want), len(ids))
	}
	leads := map[string]int{}
	for _, g := range want {
		leader := ""
		for _, n := range live {
			got := logGroups(n)
			if i := slices.IndexFunc(got, func(h fsm.QueueGroup) bool { return h.ID == g.ID }); i < 0 || !slices.Equal(got[i].Members, g.Members) {
				return nil, fmt.Errorf("%s: group %s is %+v, want %+v", n.NodeID(), g.ID, got, g)
			}
			var gs *cluster.GroupStatus
			for _, s := range n.Groups() {
				if s.ID == g.ID {
					gs = &s
				}
			}
			if (gs != nil) != g.HasMember(n.NodeID()) {
				return nil, fmt.Errorf("%s runs group %s: %v, member of it: %v", n.NodeID(), g.ID, gs != nil, g.HasMember(n.NodeID()))
			}
			if gs == nil {
				continue
			}
			if gs.Leader == "" || leader != "" && gs.Leader != leader {
				return nil, fmt.Errorf("group %s: %s sees leader %q, others %q", g.ID, n.NodeID(), gs.Leader, leader)
			}
			leader = gs.Leader
			if gs.Leader == n.NodeID() && !slices.Equal(gs.Voters(), sortedMembers(g)) {
				return nil, fmt.Errorf("group %s: voters %v, the log's members %v", g.ID, gs.Voters(), sortedMembers(g))
			}
		}
		if led && leader != g.Members[0].ID {
			return nil, fmt.Errorf("group %s led by %s, meant to be led by %s", g.ID, leader, g.Members[0].ID)
		}
		leads[leader]++
	}
	return leads, nil
}

// commitThroughLeaders commits a Tick in each group through a member.
func commitThroughLeaders(t *testing.T, c *clustertest.Cluster, ids []string) {
	t.Helper()
	for _, id := range ids {
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			for _, n := range c.Live() {
				res, err := n.SubmitGroup(ctxT(t, clustertest.Timeout), id, []*proto.Command{tick()})
				if errors.Is(err, cluster.ErrNoSuchGroup) {
					continue
				}
				if err != nil || len(res) != 1 || res[0].GetCode() != 0 {
					return fmt.Errorf("group %s through %s: %v, %v", id, n.NodeID(), res, err)
				}
				return nil
			}
			return fmt.Errorf("no node runs group %s", id)
		})
	}
}

// queueGroupChangesOK fails t unless grow or shrink went through for
// every queue group it changed.
func queueGroupChangesOK(t *testing.T) func([]cluster.GroupChange, error) {
	return func(changes []cluster.GroupChange, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range changes {
			if ch.Group != group.DefaultID && ch.Err != nil {
				t.Fatalf("changes %+v", changes)
			}
		}
	}
}

// A three-node cluster with three queue groups grown to five: the
// metadata leader spreads the groups' members over the five voters, the
// new nodes open the groups they are named in (without bootstrapping)
// and are added by the groups' leaders, the nodes replaced close theirs,
// and the leaderships move to the members meant to lead, the new nodes
// among them. Shrink takes a node out of every group through the log,
// grow puts it in every group, and rebalance spreads them again.
func TestQueueGroups_FollowNewNodes(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithConfig(following(3)))
	c.WaitForLeader(clustertest.Timeout)
	waitQueueGroups(t, c, queueGroupIDs)
	before := logGroups(c.Nodes[0].Node())
	grown := time.Now()
	c.Add(following(3))
	c.Add(following(3))

	var leads map[string]int
	clustertest.Eventually(t, 2*clustertest.Timeout, func() (err error) {
		// The new nodes count once the metadata leader took them as
		// voters; until then the groups follow the three.
		l := c.Leader()
		if l == nil || len(voters(l)) != 5 {
			return errors.New("the metadata leader has not taken both new nodes as voters")
		}
		if leads, err = followed(c, queueGroupIDs, true); err != nil {
			return err
		}
		// Spread over the five: both new nodes are members, and one
		// of them at least leads.
		in := map[string]int{}
		for _, g := range logGroups(l) {
			for _, m := range g.Members {
				in[m.ID]++
			}
		}
		if in["node3"] == 0 || in["node4"] == 0 || leads["node3"]+leads["node4"] == 0 {
			return fmt.Errorf("memberships %v, leaderships %v", in, leads)
		}
		return nil
	})
	t.Logf("two nodes added: groups spread and led by the members meant to lead them %v later", time.Since(grown).Round(time.Millisecond))
	after := logGroups(c.Nodes[0].Node())
	in := map[string]int{}
	for i, g := range after {
		if len(g.Members) != 3 || g.Epoch == 0 && !slices.Equal(g.Members, before[i].Members) {
			t.Fatalf("group %+v", g)
		}
		for _, m := range g.Members {
			in[m.ID]++
		}
	}
	if in["node3"] == 0 || in["node4"] == 0 || leads["node3"]+leads["node4"] == 0 {
		t.Fatalf("memberships %v, leaderships %v: %+v", in, leads, after)
	}
	for id, k := range leads {
		if k > 1 {
			t.Fatalf("%s leads %d groups: %v", id, k, leads)
		}
	}
	commitThroughLeaders(t, c, queueGroupIDs)

	l := c.WaitForLeader(clustertest.Timeout)
	changes, err := l.ShrinkGroups(ctxT(t, clustertest.Timeout), "node4")
	queueGroupChangesOK(t)(changes, err)
	if i := slices.IndexFunc(changes, func(ch cluster.GroupChange) bool { return ch.Group == group.DefaultID }); i >= 0 {
		t.Fatalf("shrink changed the metadata group: %+v", changes[i])
	}
	// Applied on l when shrink returns: unless a new metadata leader
	// spread the groups over node4 again, no group names it; node4,
	// still a voter of the metadata group, learns that from the log and
	// closes its groups. A spread (rebalance's) leaves it out.
	notIn := func() {
		t.Helper()
		for _, g := range logGroups(l) {
			if g.HasMember("node4") && l.IsLeader() {
				t.Fatalf("node4 still in %+v", g)
			}
		}
	}
	notIn()
	if _, err := l.RebalanceGroups(ctxT(t, clustertest.Timeout)); err != nil {
		t.Fatal(err)
	}
	notIn()
	clustertest.Eventually(t, 2*clustertest.Timeout, func() error {
		if gs := c.Nodes[4].Node().Groups(); len(gs) != 1 && l.IsLeader() {
			return fmt.Errorf("node4 runs %d groups", len(gs))
		}
		_, err := followed(c, queueGroupIDs, false)
		return err
	})
	// Shrunk, node4 stays in the cluster: a voter of the metadata group,
	// it commits through it and through the queue groups it left.
	if v := voters(l); !slices.Contains(v, "node4") && l.IsLeader() {
		t.Fatalf("node4 is no voter of the metadata group after its shrink: %v", v)
	}
	shrunk := c.Nodes[4].Node()
	if _, err := shrunk.Submit(ctxT(t, clustertest.Timeout), tick()); err != nil {
		t.Fatalf("node4 commits nothing after its shrink: %v", err)
	}
	for _, id := range queueGroupIDs {
		if res, err := shrunk.SubmitGroup(ctxT(t, clustertest.Timeout), id, []*proto.Command{tick()}); err != nil || len(res) != 1 || res[0].GetCode() != 0 {
			t.Fatalf("node4 commits nothing in %s after its shrink: %v %v", id, res, err)
		}
	}
	queueGroupChangesOK(t)(l.GrowGroups(ctxT(t, clustertest.Timeout), "node4", false))
	for _, g := range logGroups(l) {
		if !g.HasMember("node4") && l.IsLeader() {
			t.Fatalf("node4 not in %+v after grow", g)
		}
	}
	clustertest.Eventually(t, 2*clustertest.Timeout, func() error {
		_, err := followed(c, queueGroupIDs, false)
		return err
	})
	if _, err := l.RebalanceGroups(ctxT(t, clustertest.Timeout)); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 2*clustertest.Timeout, func() error {
		_, err := followed(c, queueGroupIDs, true)
		return err
	})
	commitThroughLeaders(t, c, queueGroupIDs)
	c.AssertSameDigest(t)
}

// With queue groups, shrink refuses to take a node out of a group whose
// other online members would be fewer than a majority, as
// rabbitmq-queues does, and leaves the metadata group alone; a shrink
// refused everywhere holds nothing, so that no later spread (rebalance's,
// once every node is back) does what it refused. A shrink of a node the
// cluster does not know changes nothing.
func TestQueueGroups_ShrinkRefusesWhatWouldStopAGroup(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithConfig(following(3)))
	l := c.WaitForLeader(clustertest.Timeout)
	waitQueueGroups(t, c, queueGroupIDs)
	clustertest.Eventually(t, 2*clustertest.Timeout, func() error {
		_, err := followed(c, queueGroupIDs, false)
		return err
	})
	fs := c.Followers()
	f1, f2 := fs[0].NodeID(), fs[1].NodeID()
	if changes, err := l.ShrinkGroups(ctxT(t, clustertest.Timeout), "nosuch"); err != nil || len(changes) != 0 {
		t.Fatalf("shrink of an unknown node: %+v %v", changes, err)
	}
	c.Kill(c.Index(f2))
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		for _, m := range l.Members() {
			if m.ID == f2 && m.Health == cluster.HealthAlive {
				return fmt.Errorf("%s still alive to the leader", f2)
			}
		}
		return nil
	})
	changes, err := l.ShrinkGroups(ctxT(t, clustertest.Timeout), f1)
	if err != nil || len(changes) != len(queueGroupIDs) {
		t.Fatalf("shrink with a member down: %+v %v", changes, err)
	}
	for _, ch := range changes {
		if ch.Group == group.DefaultID || !errors.Is(ch.Err, cluster.ErrQuorumCritical) || ch.Size != 3 {
			t.Fatalf("shrink with a member down: %+v", changes)
		}
	}
	c.Restart(c.Index(f2))
	clustertest.Eventually(t, 2*clustertest.Timeout, func() error {
		_, err := followed(c, queueGroupIDs, false)
		return err
	})
	if _, err := l.RebalanceGroups(ctxT(t, clustertest.Timeout)); err != nil {
		t.Fatal(err)
	}
	for _, g := range logGroups(l) {
		if !g.HasMember(f1) || len(g.Members) != 3 {
			t.Fatalf("after a refused shrink of %s and a rebalance: %+v", f1, g)
		}
	}
}

// Each queue group's log is brought to the metadata log's protocol level
// and given its number, the group's position in the metadata log from 1,
// by its leader alone: every member applies the same entries, so their
// digests agree.
func TestQueueGroups_LogsTakeTheMetadataLevelAndTheirNumber(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithConfig(following(3)))
	l := c.WaitForLeader(clustertest.Timeout)
	waitQueueGroups(t, c, queueGroupIDs)
	var level uint32
	l.View(func(m *fsm.Machine) { level = m.ProtocolLevel() })
	if level < fsm.GroupsLevel {
		t.Fatalf("metadata log at level %d", level)
	}
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		for num, id := range queueGroupIDs {
			for _, n := range c.Live() {
				var got, g uint32
				if !n.ViewGroup(id, func(m *fsm.Machine) { got, g = m.ProtocolLevel(), m.Group() }) {
					return fmt.Errorf("%s does not run %s", n.NodeID(), id)
				}
				if got != level || g != uint32(num+1) {
					return fmt.Errorf("%s: group %s at level %d, number %d; want %d, %d", n.NodeID(), id, got, g, level, num+1)
				}
			}
		}
		return nil
	})
	for _, id := range queueGroupIDs {
		assertGroupDigests(t, c, id)
	}
	commitThroughLeaders(t, c, queueGroupIDs)
}

// A node cut off while it is shrunk never receives the entries that
// take it out of its queue groups: its log still names it a member.
// Reachable again, it closes them, as it learns from the metadata
// log, whose voter it stays, or from the groups' leaders, which it asks;
// the others never notice. The cut lasts until gossip declares the node
// dead: reachable again, the node running the same boot stays out of
// the queue groups (the shrink holds), and once restarted the groups are
// spread over it again.
func TestQueueGroups_ShrunkWhileCutOffClosesItsGroups(t *testing.T) {
	// Healed, the node learns that it was removed from the groups'
	// leaders, which it asks: no silence is waited for.
	defer cluster.NoRemovedSilence()()
	c := clustertest.New(t, 4, clustertest.WithConfig(following(3)))
	l := c.WaitForLeader(clustertest.Timeout)
	var victim *cluster.Node
	clustertest.Eventually(t, 2*clustertest.Timeout, func() error {
		if _, err := followed(c, queueGroupIDs, false); err != nil {
			return err
		}
		for _, n := range c.Live() {
			if n != l && len(n.Groups()) > 1 {
				victim = n
				return nil
			}
		}
		return errors.New("no follower of the metadata group runs a queue group")
	})
	id := victim.NodeID()
	c.Partition(id)
	// A command the cut-off node holds for a leader of one of its
	// groups is not lost with the group: it goes to the group's
	// leader, as a command of a node outside the group does, once the
	// node reaches it again.
	var waiting []string
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		waiting = waiting[:0]
		for _, g := range victim.Groups() {
			if g.ID == group.DefaultID {
				continue
			}
			if g.State == "Leader" || g.Leader != "" {
				return fmt.Errorf("%s still sees %q leading %s", id, g.Leader, g.ID)
			}
			waiting = append(waiting, g.ID)
		}
		return nil
	})
	held := make(chan error, len(waiting))
	for _, gid := range waiting {
		go func() {
			res, err := victim.SubmitGroup(ctxT(t, 10*clustertest.Timeout), gid, []*proto.Command{tick()})
			if err == nil && (len(res) != 1 || res[0].GetCode() != 0) {
				err = fmt.Errorf("results %v", res)
			}
			held <- err
		}()
	}
	// Shrink refuses nothing for a node gossip no longer sees: wait for
	// it to be seen down, so that the groups' leaders hand nothing to it.
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if l.IsLeader() && !slices.ContainsFunc(l.Members(), func(m cluster.MemberInfo) bool {
			return m.ID == id && m.Health == cluster.HealthAlive
		}) {
			return nil
		}
		return fmt.Errorf("%s still alive to %s", id, l.NodeID())
	})
	queueGroupChangesOK(t)(l.ShrinkGroups(ctxT(t, clustertest.Timeout), id))
	for _, g := range logGroups(l) {
		if g.HasMember(id) {
			t.Fatalf("%s still in %+v", id, g)
		}
	}
	kept := len(victim.Groups())
	// What a node down for good looks like to the leader: gossip too
	// finds it dead, not only raft unreached.
	seenAs := func(health string) func() error {
		return func() error {
			ms := l.Members()
			i := slices.IndexFunc(ms, func(m cluster.MemberInfo) bool { return m.ID == id })
			if i < 0 {
				return fmt.Errorf("%s unknown to %s", id, l.NodeID())
			}
			if h := ms[i].Health; h != health {
				return fmt.Errorf("%s is %q to %s, want %q", id, h, l.NodeID(), health)
			}
			return nil
		}
	}
	clustertest.Eventually(t, clustertest.Timeout, seenAs(cluster.HealthDead))
	c.Heal()
	clustertest.Eventually(t, clustertest.Timeout, seenAs(cluster.HealthAlive))
	clustertest.Eventually(t, 2*clustertest.Timeout, func() error {
		if gs := victim.Groups(); len(gs) != 1 {
			return fmt.Errorf("%s runs %d groups: %s", id, len(gs), groupViews(c, gs))
		}
		return nil
	})
	t.Logf("%s ran %d groups when healed, the metadata group alone since", id, kept)
	for range waiting {
		select {
		case err := <-held:
			if err != nil {
				t.Fatalf("a command held for a group %s left: %v", id, err)
			}
		case <-time.After(clustertest.Timeout):
			t.Fatalf("a command held for a group %s left still waits for the group's leader", id)
		}
	}
	commitThroughLeaders(t, c, queueGroupIDs)
	for _, g := range logGroups(l) {
		if g.HasMember(id) {
			t.Fatalf("%s is in %+v again without a restart", id, g)
		}
	}

	c.Restart(c.Index(id))
	clustertest.Eventually(t, 2*clustertest.Timeout, func() error {
		if gs := c.Nodes[c.Index(id)].Node().Groups(); len(gs) == 1 {
			return fmt.Errorf("%s runs no queue group after its restart", id)
		}
		return nil
	})
	commitThroughLeaders(t, c, queueGroupIDs)
}

// groupViews describes, for a failure, how each live node sees the groups
// of gs: its raft state, the leader it knows, the term and the members
// of its configuration (with * for those it finds online).
func groupViews(c *clustertest.Cluster, gs []cluster.GroupStatus) string {
	var b strings.Builder
	for _, g := range gs {
		fmt.Fprintf(&b, "\n  %s:", g.Name)
		for _, n := range c.Live() {
			for _, v := range n.Groups() {
				if v.ID != g.ID {
					continue
				}
				fmt.Fprintf(&b, " %s=%s/leader %q/term %d/members", n.NodeID(), v.State, v.Leader, v.Term)
				for _, m := range v.Members {
					fmt.Fprintf(&b, " %s", m.ID)
					if m.Online {
						b.WriteString("*")
					}
				}
				b.WriteString(";")
			}
		}
	}
	return b.String()
}

// A new leader of a queue group whose first barrier fails while it keeps
// its place (raft refuses a barrier while a leadership transfer starts,
// as a rebalance's hand-back may, and the transfer may fail) asks for it
// again, and the group takes commands: unready, it would leave every
// command of the group waiting for a leader until the leadership moved.
func TestQueueGroups_ALeaderWhoseBarrierFailedAsksAgain(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithConfig(following(3)))
	c.WaitForLeader(clustertest.Timeout)
	clustertest.Eventually(t, 2*clustertest.Timeout, func() error {
		_, err := followed(c, queueGroupIDs, false)
		return err
	})
	commitThroughLeaders(t, c, queueGroupIDs)
	victim := -1
	for _, n := range c.Live() {
		for _, g := range n.Groups() {
			if g.ID != group.DefaultID && g.State == "Leader" {
				victim = c.Index(n.NodeID())
			}
		}
	}
	if victim < 0 {
		t.Fatal("no node leads a queue group")
	}
	restore := cluster.FailGroupBarriers(1)
	defer restore()
	c.Kill(victim)
	commitThroughLeaders(t, c, queueGroupIDs)
}

// On three nodes, each leads the group it is meant to lead; the leader
// of one is stopped, another member takes the group over, and once the
// node is back and steady for LeadershipBalanceAfter, the leadership
// returns to it: each node leads one group again.
func TestQueueGroups_LeadershipComesBack(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithConfig(following(3)))
	c.WaitForLeader(clustertest.Timeout)
	waitQueueGroups(t, c, queueGroupIDs)
	clustertest.Eventually(t, 2*clustertest.Timeout, func() error {
		leads, err := followed(c, queueGroupIDs, true)
		if err == nil && len(leads) != 3 {
			err = fmt.Errorf("leaderships %v", leads)
		}
		return err
	})
	victim := logGroups(c.Nodes[0].Node())[0].Members[0].ID
	c.Kill(c.Index(victim))
	clustertest.Eventually(t, 2*clustertest.Timeout, func() error {
		for _, n := range c.Live() {
			for _, g := range n.Groups() {
				if g.Leader == "" || g.Leader == victim {
					return fmt.Errorf("%s: group %s led by %q", n.NodeID(), g.Name, g.Leader)
				}
			}
		}
		return nil
	})
	commitThroughLeaders(t, c, queueGroupIDs)
	back := time.Now()
	c.Restart(c.Index(victim))
	c.WaitForLeader(clustertest.Timeout)
	clustertest.Eventually(t, 2*clustertest.Timeout, func() error {
		leads, err := followed(c, queueGroupIDs, true)
		if err == nil && leads[victim] != 1 {
			err = fmt.Errorf("leaderships %v", leads)
		}
		return err
	})
	t.Logf("%s restarted: leading its group again %v later (LeadershipBalanceAfter 1s)", victim, time.Since(back).Round(time.Millisecond))
	commitThroughLeaders(t, c, queueGroupIDs)
	c.AssertSameDigest(t)
}

// A new cluster's queue groups are led by the members meant to lead them
// within seconds of forming, not a LeadershipBalanceAfter later: the
// first elections fall where they fall, and a leader that took its group
// while the member meant to lead it was online hands it over once the
// leadership settled.
func TestQueueGroups_ANewClustersLeadershipsSpreadWithinSeconds(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithConfig(func(_ int, cfg *cluster.Config) {
		cfg.QueueGroups = 3
		cfg.LeadershipBalanceAfter = time.Hour
	}))
	c.WaitForLeader(clustertest.Timeout)
	waitQueueGroups(t, c, queueGroupIDs)
	start := time.Now()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		leads, err := followed(c, queueGroupIDs, true)
		if err == nil && len(leads) != 3 {
			err = fmt.Errorf("leaderships %v", leads)
		}
		return err
	})
	t.Logf("every queue group led by the member meant to lead it %v after the groups formed", time.Since(start).Round(time.Millisecond))
}

// slowClockReads is the configuration of the tests of a queue group's
// first stamps: three groups, and a node reads the voters' clocks only
// when it starts and when a term asks (the hour between readings), so
// that a node leading no metadata term has no reading of its own.
func slowClockReads(_ int, cfg *cluster.Config) {
	cfg.QueueGroups = 3
	cfg.ClockSampleInterval = time.Hour
}

// numberedGroups waits until every member of every queue group the
// log of l names numbered its log (GroupInit, the first entry a group's
// first leader stamps) and returns the groups.
func numberedGroups(t *testing.T, c *clustertest.Cluster, l *cluster.Node) []fsm.QueueGroup {
	t.Helper()
	var gs []fsm.QueueGroup
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if gs = logGroups(l); len(gs) != len(queueGroupIDs) {
			return fmt.Errorf("the log names %d queue groups", len(gs))
		}
		for _, g := range gs {
			for _, m := range g.Members {
				var num uint32
				c.Nodes[c.Index(m.ID)].Node().ViewGroup(g.ID, func(m *fsm.Machine) { num = m.Group() })
				if num == 0 {
					return fmt.Errorf("%s: group %s not yet numbered", m.ID, g.ID)
				}
			}
		}
		return nil
	})
	return gs
}

// groupStamps calls fn with each command entry of every group in gs past
// index from[member+group] on each member, and reports how many it saw.
func groupStamps(t *testing.T, c *clustertest.Cluster, gs []fsm.QueueGroup, from map[string]uint64, fn func(member, group string, i uint64, stamp int64)) int {
	t.Helper()
	seen := 0
	for _, g := range gs {
		for _, m := range g.Members {
			if err := c.Nodes[c.Index(m.ID)].Node().GroupLogEntries(g.ID, func(i uint64, env *proto.Envelope) bool {
				if i > from[m.ID+"/"+g.ID] {
					seen++
					fn(m.ID, g.ID, i, env.GetStampMs())
				}
				return true
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return seen
}

// A new cluster's queue group may be led first by a node that has not
// read the voters' clocks yet (it leads no metadata term, which waits for
// a reading). Its log time must still start at the quorum's time, not at
// the epoch: a message with a TTL stamped in 1970 is overdue on every
// node, and the leap to the quorum's time at the first reading would
// time out every consumer of the group at once. With five nodes and
// groups of three, some group has no member that leads the metadata
// group.
func TestQueueGroups_ANewGroupIsStampedWithTheQuorumsTime(t *testing.T) {
	start := time.Now()
	c := clustertest.New(t, 5, clustertest.WithConfig(slowClockReads))
	gs := numberedGroups(t, c, c.WaitForLeader(clustertest.Timeout))
	// The clocks of one machine: the quorum's time is this test's.
	floor := start.Add(-time.Second).UnixMilli()
	if groupStamps(t, c, gs, nil, func(member, group string, i uint64, stamp int64) {
		if stamp < floor {
			t.Errorf("%s: group %s's entry %d stamped %v, before the cluster started (%v)", member, group, i,
				time.UnixMilli(stamp).UTC(), start.UTC())
		}
	}) == 0 {
		t.Fatal("the groups' logs hold no command")
	}
}

// A cluster back from a stop of two hours: a queue group's first leader
// after the restart stamps from the quorum's time, not from where the
// group's log stopped, whether or not it has read the voters' clocks yet
// (else the group's log clock would leap two hours at that node's first
// reading: its TTLs would run out at once, and every consumer holding a
// delivery would time out).
func TestQueueGroups_BackFromALongStopAGroupIsStampedWithTheQuorumsTime(t *testing.T) {
	c := clustertest.New(t, 5, clustertest.WithFakeClock(t0), clustertest.WithConfig(slowClockReads))
	gs := numberedGroups(t, c, c.WaitForLeader(clustertest.Timeout))
	before := map[string]uint64{}
	groupStamps(t, c, gs, nil, func(member, group string, i uint64, _ int64) { before[member+"/"+group] = i })
	for i := range c.Nodes {
		c.Kill(i)
	}
	const stopped = 2 * time.Hour
	c.AdvanceClock(stopped)
	for i := range c.Nodes {
		c.Restart(i)
	}
	l := c.WaitForLeader(clustertest.Timeout)
	tick := []*proto.Command{{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}}
	for _, g := range gs {
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err := l.SubmitGroup(ctx, g.ID, tick)
			return err
		})
	}
	back := t0.Add(stopped).UnixMilli()
	if groupStamps(t, c, gs, before, func(member, group string, i uint64, stamp int64) {
		if stamp < back {
			t.Errorf("%s: group %s's entry %d stamped %v after the restart, %v before the quorum's time", member, group, i,
				time.UnixMilli(stamp).UTC(), time.Duration(back-stamp)*time.Millisecond)
		}
	}) == 0 {
		t.Fatal("no entry after the restart")
	}
}

// With one queue group per node, a three-node cluster runs three, and
// two nodes added make it five: each node a member of three groups and
// the leader of one, so that the load of five nodes' queues spreads over
// all five.
func TestQueueGroups_PerNodeAddsAGroupForEachNewNode(t *testing.T) {
	perNode := func(_ int, c *cluster.Config) {
		c.QueueGroupsPerNode = true
		c.LeadershipBalanceAfter = time.Second
	}
	c := clustertest.New(t, 3, clustertest.WithConfig(perNode))
	c.WaitForLeader(clustertest.Timeout)
	waitQueueGroups(t, c, queueGroupIDs)
	c.Add(perNode)
	c.Add(perNode)
	five := []string{"q1", "q2", "q3", "q4", "q5"}
	clustertest.Eventually(t, 2*clustertest.Timeout, func() error {
		l := c.Leader()
		if l == nil || len(voters(l)) != 5 {
			return errors.New("the metadata leader has not taken both new nodes as voters")
		}
		leads, err := followed(c, five, true)
		if err != nil {
			return err
		}
		in := map[string]int{}
		for _, g := range logGroups(l) {
			for _, m := range g.Members {
				in[m.ID]++
			}
		}
		for _, n := range c.Live() {
			if id := n.NodeID(); in[id] != 3 || leads[id] != 1 {
				return fmt.Errorf("memberships %v, leaderships %v", in, leads)
			}
		}
		return nil
	})
	commitThroughLeaders(t, c, five)
	c.AssertSameDigest(t)
}

// Internal.GroupVoter answers from a queue group's ready leader alone,
// after a barrier: whether the node asked about is a voter of the
// group's configuration. A follower refuses with FAILED_PRECONDITION
// (the asker tries the leader gossip names next round), a node that does
// not run the group with NOT_FOUND.
func TestQueueGroups_GroupVoterAnswersFromTheLeaderAlone(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithConfig(following(3)))
	c.WaitForLeader(clustertest.Timeout)
	clustertest.Eventually(t, 2*clustertest.Timeout, func() error {
		_, err := followed(c, queueGroupIDs, true)
		return err
	})
	const id = "q1"
	var leader, follower *cluster.Node
	for _, n := range c.Live() {
		for _, g := range n.Groups() {
			if g.ID != id {
				continue
			}
			if g.State == "Leader" {
				leader = n
			} else {
				follower = n
			}
		}
	}
	if leader == nil || follower == nil {
		t.Fatalf("group %s: leader %v, follower %v", id, leader, follower)
	}
	ask := func(n *cluster.Node, group, node string) (*proto.GroupVoterResponse, error) {
		return proto.NewInternalClient(dialInternal(t, c, n)).GroupVoter(ctxT(t, clustertest.Timeout),
			&proto.GroupVoterRequest{Group: group, Node: node})
	}
	resp, err := ask(leader, id, follower.NodeID())
	if err != nil || !resp.GetVoter() || resp.GetTerm() == 0 {
		t.Fatalf("the leader asked about its follower: %v, %v", resp, err)
	}
	if resp, err := ask(leader, id, "node9"); err != nil || resp.GetVoter() {
		t.Fatalf("the leader asked about a stranger: %v, %v", resp, err)
	}
	if _, err := ask(follower, id, follower.NodeID()); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a follower asked: %v, want FailedPrecondition", err)
	}
	if _, err := ask(leader, "q9", follower.NodeID()); status.Code(err) != codes.NotFound {
		t.Fatalf("a group no node runs: %v, want NotFound", err)
	}
}
