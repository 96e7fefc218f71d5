package cluster_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/proto"
)

// nodeDowns counts the NodeDown entries for id in n's log.
func nodeDowns(n *cluster.Node, id string) int {
	k := 0
	_ = n.LogEntries(func(_ uint64, env *proto.Envelope) bool {
		for _, cmd := range env.GetCommands() {
			if cmd.GetNodeDown().GetNode() == id {
				k++
			}
		}
		return true
	})
	return k
}

// awaitNodeDown waits until a ready leader's log holds a NodeDown for id
// and returns how long that took from start.
func awaitNodeDown(t *testing.T, c *clustertest.Cluster, id string, start time.Time) time.Duration {
	t.Helper()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		l := c.Leader()
		if l == nil || l.NodeID() == id {
			return errors.New("no leader of the others yet")
		}
		if nodeDowns(l, id) == 0 {
			return fmt.Errorf("no NodeDown for %s", id)
		}
		return nil
	})
	return time.Since(start)
}

// productionGossip leaves memberlist at its default timings, which notice
// a silent member only after seconds: the tight timings of clustertest
// would declare it dead first and hide what raft sees.
var productionGossip = clustertest.WithConfig(func(_ int, cfg *cluster.Config) { cfg.Gossip = nil })

// A frozen follower keeps its raft connections open and answers nothing:
// its heartbeats fail only at the transport's 10 s I/O timeout. The
// leader declares it down once it has answered nothing for NodeDownAfter.
func TestCluster_FrozenFollowerDeclaredDownAfterNodeDownAfter(t *testing.T) {
	c := clustertest.New(t, 3, productionGossip)
	l := c.WaitForLeader(clustertest.Timeout)
	victim := c.Followers()[0]
	mustSubmit(t, victim, tick())
	frozen := time.Now()
	c.Freeze(victim.NodeID())
	defer c.Heal()
	took := awaitNodeDown(t, c, victim.NodeID(), frozen)
	after := c.Nodes[c.Index(l.NodeID())].Config.NodeDownAfter
	t.Logf("frozen follower declared down %v after the freeze (NodeDownAfter %v)", took.Round(time.Millisecond), after)
	// The transport's I/O timeout (10 s) is what the leader waited for
	// before; the reconcile round adds NodeDownAfter/8.
	if took > 3*after {
		t.Fatalf("declared down %v after the freeze, want about NodeDownAfter (%v)", took, after)
	}
}

// A frozen leader: the others elect a new leader within an election, and
// the new leader counts the old one's silence from when it last heard
// from it, not from its own election.
func TestCluster_FrozenLeaderDeclaredDownByItsSuccessor(t *testing.T) {
	c := clustertest.New(t, 3, productionGossip)
	old := c.WaitForLeader(clustertest.Timeout)
	for _, f := range c.Followers() {
		mustSubmit(t, f, tick())
	}
	frozen := time.Now()
	c.Freeze(old.NodeID())
	defer c.Heal()
	took := awaitNodeDown(t, c, old.NodeID(), frozen)
	after := c.Nodes[c.Index(old.NodeID())].Config.NodeDownAfter
	t.Logf("frozen leader declared down %v after the freeze (NodeDownAfter %v)", took.Round(time.Millisecond), after)
	if took > 3*after {
		t.Fatalf("declared down %v after the freeze, want about NodeDownAfter (%v)", took, after)
	}
}

// pauses records what a node's Pauser is told.
type pauses struct {
	mu     sync.Mutex
	events []string
}

func (p *pauses) Pause(reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, "pause: "+reason)
}

func (p *pauses) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, "resume")
}

func (p *pauses) list() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.events...)
}

// A node cut off from the majority pauses (its AMQP server closes the
// clients' connections and refuses new ones) about NodeDownAfter after
// the cut, rather than let its clients wait for confirms that cannot
// come; it resumes once it is back and has caught up. The majority's
// nodes never pause.
func TestCluster_PartitionedNodePausesAndResumesAfterHeal(t *testing.T) {
	t.Run("follower", func(t *testing.T) { testPartitionedNodePauses(t, false) })
	t.Run("leader", func(t *testing.T) { testPartitionedNodePauses(t, true) })
}

func testPartitionedNodePauses(t *testing.T, leader bool) {
	ps := []*pauses{{}, {}, {}}
	c := clustertest.New(t, 3, clustertest.WithConfig(func(i int, cfg *cluster.Config) { cfg.Pauser = ps[i] }))
	victim := c.WaitForLeader(clustertest.Timeout)
	if !leader {
		victim = c.Followers()[0]
	}
	vi := c.Index(victim.NodeID())
	mustSubmit(t, victim, tick())
	for i, p := range ps {
		if ev := p.list(); len(ev) != 0 {
			t.Fatalf("node%d was told %v before any fault", i, ev)
		}
	}
	cut := time.Now()
	c.Partition(victim.NodeID())
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if len(ps[vi].list()) == 0 {
			return errors.New("the cut-off node has not paused")
		}
		return nil
	})
	t.Logf("paused %v after the cut: %v", time.Since(cut).Round(time.Millisecond), ps[vi].list()[0])
	if iso, why := victim.Isolated(); !iso || why == "" {
		t.Fatalf("Isolated() = %v, %q after the pause", iso, why)
	}
	if _, why := victim.Isolated(); victim.Refusing() != why {
		t.Fatalf("paused, Refusing() = %q, want %q", victim.Refusing(), why)
	}
	c.Heal()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if ev := ps[vi].list(); len(ev) != 2 || ev[1] != "resume" {
			return fmt.Errorf("told %v, want a pause then a resume", ev)
		}
		return nil
	})
	if why := victim.Refusing(); why != "" {
		t.Fatalf("resumed, Refusing() = %q", why)
	}
	for i, p := range ps {
		if i != vi && len(p.list()) != 0 {
			t.Fatalf("node%d of the majority was told %v", i, p.list())
		}
	}
	mustSubmit(t, victim, tick())
	c.AssertSameDigest(t)
}

// While the majority elects a leader, which can take longer than
// NodeDownAfter (a follower stands only after HeartbeatTimeout to twice
// that without a leader), its followers reach each other and keep their
// clients: only a node that reaches no majority pauses.
func TestCluster_ElectionLongerThanNodeDownAfterPausesNobody(t *testing.T) {
	ps := []*pauses{{}, {}, {}}
	c := clustertest.New(t, 3, clustertest.WithConfig(func(i int, cfg *cluster.Config) {
		cfg.Pauser = ps[i]
		// Followers stand 1 to 2 s after the leader's last contact.
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
		cfg.NodeDownAfter = time.Second
	}))
	old := c.WaitForLeader(clustertest.Timeout)
	oi := c.Index(old.NodeID())
	for _, f := range c.Followers() {
		mustSubmit(t, f, tick())
	}
	frozen := time.Now()
	c.Freeze(old.NodeID())
	defer c.Heal()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		l := c.Leader()
		if l == nil || l == old {
			return errors.New("no new leader")
		}
		return nil
	})
	t.Logf("new leader %v after the freeze", time.Since(frozen).Round(time.Millisecond))
	// The old leader is declared down (its successor's first entries
	// then reach every follower), and still nobody of the majority paused.
	awaitNodeDown(t, c, old.NodeID(), frozen)
	for _, n := range c.Live() {
		if n != old {
			mustSubmit(t, n, tick())
		}
	}
	for i, p := range ps {
		if i != oi && len(p.list()) != 0 {
			t.Fatalf("node%d of the majority was told %v during the election", i, p.list())
		}
	}
}

// A node declared down while it was cut off applies, once back, the
// entries it missed: deliveries to its consumers that the log assigned
// before declaring it down, then the NodeDown that requeued them to
// others. It must not carry out those deliveries: other consumers may
// have had the messages already. It carries out the NodeDown.
func TestCluster_NodeBackFromPartitionDeliversNothingItsNodeDownSuperseded(t *testing.T) {
	sinks := []*recorder{{}, {}, {}}
	c := clustertest.New(t, 3, clustertest.WithConfig(func(i int, cfg *cluster.Config) { cfg.Effects = sinks[i] }))
	l := c.WaitForLeader(clustertest.Timeout)
	waitDefaults(t, c, l)
	victim := c.Followers()[0]
	vi := c.Index(victim.NodeID())
	requireFSM(t, mustSubmit(t, l, declareWithArgs("cut")))
	consumer := &proto.ConsumerRef{Channel: &proto.ChannelRef{Node: victim.NodeID(), Connection: "conn-1", Channel: 1}, Tag: "ctag"}
	requireFSM(t, mustSubmit(t, victim, &proto.Command{Cmd: &proto.Command_Consume{Consume: &proto.Consume{
		Vhost: "/", Queue: "cut", Consumer: consumer, Prefetch: 100,
	}}}))
	requireFSM(t, mustSubmit(t, l, publishTo("cut", "before")))
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if k := sinks[vi].deliveries(); k != 1 {
			return fmt.Errorf("%d deliveries before the cut, want 1", k)
		}
		return nil
	})

	c.Partition(victim.NodeID())
	// Assigned to the cut-off consumer, which still has credit in the log.
	for i := range 10 {
		requireFSM(t, mustSubmit(t, l, publishTo("cut", fmt.Sprint("during", i))))
	}
	awaitNodeDown(t, c, victim.NodeID(), time.Now())
	c.Heal()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if d := sinks[vi].downs(); len(d) != 1 {
			return fmt.Errorf("the node's Sink was told of NodeDown %v", d)
		}
		return nil
	})
	if k := sinks[vi].deliveries(); k != 1 {
		t.Fatalf("the node carried out %d deliveries, want only the one before the cut", k)
	}
	c.AssertSameDigest(t)
}

// A frozen leader whose first successor is frozen too, once every other
// node follows it: the third leader never followed the first, yet counts
// its silence from when it last heard from it, not from its own
// election. Counted from the election, the first leader's consumers held
// their messages a whole NodeDownAfter longer (the five-node freeze of
// the fault suite, where the metadata group elected twice).
func TestCluster_LeaderFrozenBeforeTwoElectionsDeclaredDownFromItsSilence(t *testing.T) {
	c := clustertest.New(t, 5, productionGossip)
	first := c.WaitForLeader(clustertest.Timeout)
	for _, f := range c.Followers() {
		mustSubmit(t, f, tick())
	}
	c.Freeze(first.NodeID())
	defer c.Heal()
	// The second leader, once every live node follows it.
	var second *cluster.Node
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		second = nil
		for _, n := range c.Live() {
			if n != first && n.IsLeader() {
				second = n
			}
		}
		if second == nil {
			return errors.New("no second leader yet")
		}
		for _, n := range c.Live() {
			if id, _ := n.Leader(); n != first && id != second.NodeID() {
				return fmt.Errorf("%s follows %q, not %s", n.NodeID(), id, second.NodeID())
			}
		}
		return nil
	})
	if nodeDowns(second, first.NodeID()) != 0 {
		t.Skip("the second leader declared the first down before it could be frozen: nothing to tell")
	}
	c.Freeze(first.NodeID(), second.NodeID())
	var third *cluster.Node
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		for _, n := range c.Live() {
			if n != first && n != second && n.IsLeader() {
				third = n
				return nil
			}
		}
		return errors.New("no third leader yet")
	})
	elected := time.Now()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if nodeDowns(third, first.NodeID()) == 0 {
			return fmt.Errorf("no NodeDown for %s", first.NodeID())
		}
		return nil
	})
	took := time.Since(elected)
	after := c.Nodes[c.Index(third.NodeID())].Config.NodeDownAfter
	t.Logf("first leader declared down %v after the third leader's election (NodeDownAfter %v)", took.Round(time.Millisecond), after)
	// It had been silent for two elections already: the third leader
	// gives it the first appends' grace (NodeDownAfter/4), and the
	// reconcile round adds up to NodeDownAfter/8.
	if took >= after*3/4 {
		t.Fatalf("declared down %v after the third leader's election, want well within NodeDownAfter (%v): counted from the election, not from its silence", took, after)
	}
}
