package cluster_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

// namedGroups waits until the metadata log names k queue groups of three
// members each, every one led by a live member its members agree on, and
// returns them as the metadata leader's log names them; it checks that
// every live node is a member of some group and not of another.
func namedGroups(t *testing.T, c *clustertest.Cluster, k int) []fsm.QueueGroup {
	t.Helper()
	var specs []fsm.QueueGroup
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		specs = logGroups(c.WaitForLeader(clustertest.Timeout))
		if len(specs) != k {
			return fmt.Errorf("the log names %d queue groups, want %d", len(specs), k)
		}
		for _, s := range specs {
			if len(s.Members) != 3 {
				return fmt.Errorf("group %s has members %v, want 3", s.ID, s.Members)
			}
		}
		return nil
	})
	for _, s := range specs {
		groupLeader(t, c, s.ID)
	}
	for _, n := range c.Live() {
		in, out := 0, 0
		for _, s := range specs {
			if s.HasMember(n.NodeID()) {
				in++
			} else {
				out++
			}
		}
		if in == 0 || out == 0 {
			t.Fatalf("%s is a member of %d groups and not of %d: want some of each", n.NodeID(), in, out)
		}
	}
	return specs
}

// memberNodes are the live nodes among g's members.
func memberNodes(c *clustertest.Cluster, g fsm.QueueGroup) []*cluster.Node {
	var ns []*cluster.Node
	for _, n := range c.Live() {
		if g.HasMember(n.NodeID()) {
			ns = append(ns, n)
		}
	}
	return ns
}

// A node that is not a member of a queue group submits into its log:
// its commands go to the group's leader, every member applies them, and
// once that leader is killed they reach the group's new leader.
func TestQueueGroups_ANonMemberSubmitsThroughTheLeader(t *testing.T) {
	c := clustertest.New(t, 5, clustertest.WithConfig(following(3)))
	specs := namedGroups(t, c, 3)
	g := specs[0]
	var outsider *cluster.Node
	for _, n := range c.Live() {
		if !g.HasMember(n.NodeID()) {
			outsider = n
		}
	}
	if outsider.ViewGroup(g.ID, func(*fsm.Machine) {}) {
		t.Fatalf("%s runs group %s, of which it is not a member", outsider.NodeID(), g.ID)
	}
	cmds := []*proto.Command{
		{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}},
		declareWithArgs("remote"),
	}
	for i := range 10 {
		cmds = append(cmds, fsmtest.Enqueue("/", "", "remote", fmt.Sprint(i), &proto.Properties{}, "remote"))
	}
	// A leadership change on a loaded machine may leave a try's
	// outcome unknown: the tries go on, and the counts below are at
	// least.
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		res, err := outsider.SubmitGroup(ctxT(t, clustertest.Timeout), g.ID, cmds)
		if err != nil {
			if errors.Is(err, cluster.ErrNoSuchGroup) {
				t.Fatalf("%s submitting into group %s: %v", outsider.NodeID(), g.ID, err)
			}
			return err
		}
		requireFSM(t, res)
		if len(res) != len(cmds) || res[0].GetIndex() == 0 {
			t.Fatalf("results %v for %d commands", res, len(cmds))
		}
		return nil
	})
	ready := func(want uint64) {
		t.Helper()
		for _, n := range memberNodes(c, g) {
			clustertest.Eventually(t, clustertest.Timeout, func() error {
				q, err := groupQueue(n, g.ID, "remote")
				if err != nil {
					return err
				}
				if q.GetReady() < want {
					return fmt.Errorf("%s: %d ready in group %s, want %d", n.NodeID(), q.GetReady(), g.ID, want)
				}
				return nil
			})
		}
	}
	ready(10)

	gl := groupLeader(t, c, g.ID)
	c.Kill(c.Index(gl.NodeID()))
	// The outsider's submits go on, to the group's new leader. A try
	// whose outcome is unknown may have committed: the count below is
	// at least.
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		res, err := outsider.SubmitGroup(ctxT(t, 5*time.Second), g.ID,
			[]*proto.Command{fsmtest.Enqueue("/", "", "remote", "after", &proto.Properties{}, "remote")})
		if err != nil {
			return err
		}
		requireFSM(t, res)
		return nil
	})
	ready(11)
	if nl := groupLeader(t, c, g.ID); nl == gl {
		t.Fatalf("group %s is still led by the killed %s", g.ID, gl.NodeID())
	}
	// A group the metadata log does not name is none.
	if _, err := outsider.SubmitGroup(ctxT(t, clustertest.Timeout), "nosuch", cmds[:1]); !errors.Is(err, cluster.ErrNoSuchGroup) {
		t.Fatalf("submitting into a group the log does not name: %v, want ErrNoSuchGroup", err)
	}
}

// A node outside a queue group hears of the group's new leader from
// the new leader's gossip: with the old leader's raft and gRPC frozen,
// its gossip still running (so gossip finds it alive) and no node
// declared down or unreached, that gossip is all that tells the node,
// and its commands must reach the new leader all the same.
func TestQueueGroups_ANonMemberFollowsTheLeaderItsGroupGossips(t *testing.T) {
	c := clustertest.New(t, 5, clustertest.WithConfig(func(i int, cfg *cluster.Config) {
		following(3)(i, cfg)
		cfg.NodeDownAfter = time.Hour // nobody is found unreached or down
	}))
	g := namedGroups(t, c, 3)[0]
	_, outsider := nonMember(t, c, g.ID)
	cmds := []*proto.Command{
		{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}},
		declareWithArgs("steered"),
	}
	submit := func(d time.Duration) error {
		res, err := outsider.SubmitGroup(ctxT(t, d), g.ID, cmds)
		if err != nil {
			return err
		}
		requireFSM(t, res)
		return nil
	}
	// The outsider's commands go to the leader first.
	clustertest.Eventually(t, clustertest.Timeout, func() error { return submit(clustertest.Timeout) })
	old := groupLeader(t, c, g.ID)
	c.FreezeButGossip(old.NodeID())
	t.Cleanup(c.Heal)
	var next *cluster.Node
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		for _, n := range memberNodes(c, g) {
			for _, gs := range n.Groups() {
				if n != old && gs.ID == g.ID && gs.State == "Leader" {
					next = n
					return nil
				}
			}
		}
		return fmt.Errorf("group %s has no leader but the frozen %s", g.ID, old.NodeID())
	})
	for _, m := range outsider.Members() {
		if m.ID == old.NodeID() && m.Health != cluster.HealthAlive {
			t.Fatalf("%s finds the frozen leader %s %v, want alive: gossip alone must tell it of the new leader", outsider.NodeID(), old.NodeID(), m.Health)
		}
	}
	// A try in flight to the frozen leader ends as outcome unknown; the
	// next goes to the leader gossip names.
	clustertest.Eventually(t, clustertest.Timeout, func() error { return submit(3 * time.Second) })
	t.Logf("group %s: led by %s after %s froze", g.ID, next.NodeID(), old.NodeID())
}

// The metadata leader declares a down node down in the queue groups it
// does not run too: what a channel of the node held in such a group is
// freed.
func TestQueueGroups_NodeDownFreesWhatTheNodeHeldInAGroupTheLeaderDoesNotRun(t *testing.T) {
	c := clustertest.New(t, 5, clustertest.WithConfig(func(i int, cfg *cluster.Config) {
		following(3)(i, cfg)
		// Leaderships stay where they are on a loaded machine: a
		// metadata leader that is a member of the group would free
		// what the node held there without going outside its groups.
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 2*time.Second, 2*time.Second, time.Second
		cfg.NodeDownAfter = cluster.LeastDownAfter(cfg.HeartbeatTimeout)
	}))
	specs := namedGroups(t, c, 3)
	l := c.WaitForLeader(clustertest.Timeout)
	var g fsm.QueueGroup
	for _, s := range specs {
		if !s.HasMember(l.NodeID()) {
			g = s
		}
	}
	if g.ID == "" {
		t.Fatalf("the metadata leader %s is a member of every group", l.NodeID())
	}
	// The victim runs neither the metadata group's leadership nor g.
	var victim *cluster.Node
	for _, n := range c.Live() {
		if n != l && !g.HasMember(n.NodeID()) {
			victim = n
		}
	}
	submit := groupSubmitter(t, c, g.ID)
	submit(&proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}}, declareWithArgs("held"))
	submit(consumeOn(&proto.ChannelRef{Node: victim.NodeID(), Connection: "conn-1", Channel: 1}, "held", "ctag", 100))
	for i := range 20 {
		submit(fsmtest.Enqueue("/", "", "held", fmt.Sprint(i), &proto.Properties{}, "held"))
	}
	if q, err := groupQueue(groupLeader(t, c, g.ID), g.ID, "held"); err != nil || q.GetUnacked() != 20 {
		t.Fatalf("the consumer holds %d (%v), want 20", q.GetUnacked(), err)
	}
	c.Kill(c.Index(victim.NodeID()))
	for _, n := range memberNodes(c, g) {
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			q, err := groupQueue(n, g.ID, "held")
			if err != nil {
				return err
			}
			if q.GetUnacked() != 0 {
				return fmt.Errorf("%s: %d still held in group %s", n.NodeID(), q.GetUnacked(), g.ID)
			}
			return nil
		})
	}
	if nl := c.WaitForLeader(clustertest.Timeout); nl != l {
		t.Logf("the metadata leadership moved to %s", nl.NodeID())
	}
}

// A queue group that lost its quorum holds up no other group's NodeDown:
// the metadata leader declares a down node down in every group at once,
// and each frees what the node held in its own log, whatever the order
// of the groups in the log.
func TestQueueGroups_AGroupWithoutQuorumHoldsUpNoOtherGroupsNodeDown(t *testing.T) {
	c := clustertest.New(t, 5, clustertest.WithConfig(func(i int, cfg *cluster.Config) {
		following(3)(i, cfg)
		cfg.LeaderWait = time.Minute // how long a proposal to the stuck group waits
	}))
	specs := namedGroups(t, c, 3)
	l := c.WaitForLeader(clustertest.Timeout)
	// The first group the log names loses two members, neither of them
	// the metadata leader.
	stuck := specs[0]
	var down []string
	for _, m := range stuck.Members {
		if m.ID != l.NodeID() && len(down) < 2 {
			down = append(down, m.ID)
		}
	}
	// A later group keeps its quorum; a channel of one of the two
	// consumes there.
	var g fsm.QueueGroup
	for _, s := range specs[1:] {
		if !s.HasMember(down[0]) || !s.HasMember(down[1]) {
			g = s
		}
	}
	if g.ID == "" {
		t.Fatalf("every group after %s has both %v as members", stuck.ID, down)
	}
	submit := groupSubmitter(t, c, g.ID)
	submit(&proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}}, declareWithArgs("held"))
	submit(consumeOn(&proto.ChannelRef{Node: down[0], Connection: "conn-1", Channel: 1}, "held", "ctag", 100))
	for i := range 10 {
		submit(fsmtest.Enqueue("/", "", "held", fmt.Sprint(i), &proto.Properties{}, "held"))
	}
	mustHoldAll(t, groupLeader(t, c, g.ID), g.ID, 10)
	c.Kill(c.Index(down[0]))
	c.Kill(c.Index(down[1]))
	// Well within LeaderWait, which a proposal to the stuck group waits.
	for _, n := range memberNodes(c, g) { // the live ones
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			q, err := groupQueue(n, g.ID, "held")
			if err != nil {
				return err
			}
			if q.GetUnacked() != 0 {
				return fmt.Errorf("%s: %d still held in group %s while %s has no quorum", n.NodeID(), q.GetUnacked(), g.ID, stuck.ID)
			}
			return nil
		})
	}
}
