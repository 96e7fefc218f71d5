package cluster_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// A frozen leader keeps its forwarding streams open and answers nothing.
// Publishing through a follower must resume about an election after the
// freeze: commands in flight to the old leader end as outcome unknown when
// the follower learns of the new leader, and new ones go to the new leader.
func TestCluster_FrozenLeaderForwardingResumesAtOnce(t *testing.T) {
	c := clustertest.New(t, 3)
	old := c.WaitForLeader(clustertest.Timeout)
	followers := c.Followers()
	for _, f := range followers {
		mustSubmit(t, f, tick())
	}

	type outcome struct {
		resumed time.Duration // first commit after the freeze, from the freeze
		unknown int
		other   error
	}
	var (
		mu     sync.Mutex
		frozen time.Time
		out    = map[string]*outcome{}
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, f := range followers {
		out[f.NodeID()] = &outcome{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := f.Submit(ctxT(t, 15*time.Second), tick())
				mu.Lock()
				o := out[f.NodeID()]
				switch {
				case err == nil:
					if !frozen.IsZero() && o.resumed == 0 {
						o.resumed = time.Since(frozen)
					}
				case errors.Is(err, cluster.ErrOutcomeUnknown):
					o.unknown++
				default:
					o.other = err
				}
				mu.Unlock()
			}
		}()
	}
	mu.Lock()
	frozen = time.Now()
	c.Freeze(old.NodeID())
	mu.Unlock()
	defer c.Heal()

	clustertest.Eventually(t, clustertest.Timeout, func() error {
		mu.Lock()
		defer mu.Unlock()
		for id, o := range out {
			if o.resumed == 0 {
				return errors.New(id + " has not committed since the freeze")
			}
		}
		return nil
	})
	close(stop)
	wg.Wait()
	for id, o := range out {
		t.Logf("%s: publishing resumed %v after the leader froze (%d outcome-unknown)", id, o.resumed.Round(time.Millisecond), o.unknown)
		if o.resumed > 2*time.Second {
			t.Errorf("%s: publishing resumed only %v after the leader froze", id, o.resumed)
		}
	}
	c.Heal()
	c.WaitForLeader(clustertest.Timeout)
	for _, n := range c.Live() {
		mustSubmit(t, n, tick())
	}
	c.AssertSameDigest(t)
}

// A server the leader's raft cannot reach is declared down after
// NodeDownAfter even while gossip says it is alive (gossip may also have
// forgotten it, or never heard of it): its consumers must not hold their
// messages for good. It is declared down once, not at every reconcile.
func TestCluster_UnreachableVoterIsDeclaredDownWhateverGossipSays(t *testing.T) {
	c := clustertest.New(t, 3)
	l := c.WaitForLeader(clustertest.Timeout)
	victim := c.Followers()[0]
	vi, li := c.Index(victim.NodeID()), c.Index(l.NodeID())
	mustSubmit(t, victim, tick())
	// Only raft's links are cut: gossip and forwarding still work.
	cut := time.Now()
	c.Nodes[li].Links.Block(c.Nodes[vi].Config.RaftAddr)
	c.Nodes[vi].Links.Block(c.Nodes[li].Config.RaftAddr)
	defer c.Heal()

	downs := func() int {
		k := 0
		_ = l.LogEntries(func(_ uint64, env *proto.Envelope) bool {
			for _, cmd := range env.GetCommands() {
				if cmd.GetNodeDown().GetNode() == victim.NodeID() {
					k++
				}
			}
			return true
		})
		return k
	}
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if downs() == 0 {
			return errors.New("no NodeDown for the unreachable voter")
		}
		return nil
	})
	took := time.Since(cut)
	t.Logf("declared down %v after raft lost it (NodeDownAfter %v)", took.Round(time.Millisecond), c.Nodes[li].Config.NodeDownAfter)
	for _, m := range l.Members() {
		// Suspect: alive in gossip (the test wants it so), unreached by raft.
		if m.ID == victim.NodeID() && m.Health != cluster.HealthSuspect {
			t.Fatalf("the leader shows %s, the test wants it alive in gossip and unreached by raft", m.Health)
		}
	}
	// Several reconciles later it is still one NodeDown (an absence: it
	// cannot be awaited, only given time to show).
	mustSubmit(t, l, tick())
	time.Sleep(4 * c.Nodes[li].Config.ReconcileInterval)
	if k := downs(); k != 1 {
		t.Fatalf("%d NodeDown entries for one loss, want 1", k)
	}
}

// With production timings (raft, memberlist and NodeDownAfter left at
// their defaults), the messages a killed node's consumer held are free
// again about two seconds after the kill: the leader's raft notices the
// refused heartbeats long before gossip declares the node dead.
func TestCluster_KilledNodesHeldMessagesFreeInAboutTwoSeconds(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithConfig(func(_ int, cfg *cluster.Config) {
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 0, 0, 0
		cfg.NodeDownAfter, cfg.ReconcileInterval = 0, 0
		cfg.Gossip = nil
	}))
	l := c.WaitForLeader(clustertest.Timeout)
	waitDefaults(t, c, l)
	victim := c.Followers()[0]
	requireFSM(t, mustSubmit(t, l, declareWithArgs("held")))
	consumer := &proto.ConsumerRef{Channel: &proto.ChannelRef{Node: victim.NodeID(), Connection: "conn-1", Channel: 1}, Tag: "ctag"}
	requireFSM(t, mustSubmit(t, victim, &proto.Command{Cmd: &proto.Command_Consume{Consume: &proto.Consume{
		Vhost: "/", Queue: "held", Consumer: consumer, Prefetch: 100,
	}}}))
	for range 20 {
		requireFSM(t, mustSubmit(t, l, publishTo("held", "m")))
	}
	unacked := func() (uint64, error) {
		var q *proto.QueueInfo
		var ok bool
		l.View(func(m *fsm.Machine) { q, ok = m.Queue("/", "held") })
		if !ok {
			return 0, errors.New("queue gone")
		}
		return q.GetUnacked(), nil
	}
	if n, err := unacked(); err != nil || n != 20 {
		t.Fatalf("the consumer holds %d (%v), want 20", n, err)
	}
	killed := time.Now()
	c.Kill(c.Index(victim.NodeID()))
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if n, err := unacked(); err != nil || n != 0 {
			return fmt.Errorf("%d still held (%v)", n, err)
		}
		return nil
	})
	took := time.Since(killed)
	t.Logf("held messages free %v after the kill", took.Round(time.Millisecond))
	if took > 3*time.Second {
		t.Fatalf("held messages free only %v after the kill, want about 2 s", took)
	}
}

// A node cut off for longer than NodeDownAfter is declared down while it
// runs; once it hears from the cluster again it applies its own NodeDown,
// and its Sink is told, so that its AMQP server closes the connections
// the log no longer knows. The other nodes' Sinks hear nothing of it.
func TestCluster_NodeDeclaredDownWhileAliveLearnsIt(t *testing.T) {
	sinks := []*recorder{{}, {}, {}}
	c := clustertest.New(t, 3, clustertest.WithConfig(func(i int, cfg *cluster.Config) {
		cfg.Effects = sinks[i]
	}))
	l := c.WaitForLeader(clustertest.Timeout)
	victim := c.Followers()[0]
	vi := c.Index(victim.NodeID())
	mustSubmit(t, victim, tick())
	c.Partition(victim.NodeID())
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		found := false
		_ = l.LogEntries(func(_ uint64, env *proto.Envelope) bool {
			for _, cmd := range env.GetCommands() {
				found = found || cmd.GetNodeDown().GetNode() == victim.NodeID()
			}
			return !found
		})
		if !found {
			return errors.New("no NodeDown for the cut-off node yet")
		}
		return nil
	})
	if got := sinks[vi].downs(); len(got) != 0 {
		t.Fatalf("the cut-off node heard of NodeDown %v before it could", got)
	}
	c.Heal()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if got := sinks[vi].downs(); !slices.Equal(got, []string{victim.NodeID()}) {
			return fmt.Errorf("the node's Sink was told %v", got)
		}
		return nil
	})
	for i, s := range sinks {
		if i != vi && len(s.downs()) != 0 {
			t.Fatalf("node%d's Sink was told of another node's NodeDown: %v", i, s.downs())
		}
	}
}

// A node whose peers stopped answering (frozen, or their addresses gone
// with their containers) stops at once: raft's shutdown waits for its
// requests in flight, and those waited for the transport's timeout (10 s)
// on peers that never answer. A whole-cluster stop took that long on the
// last node down.
func TestCluster_CloseDoesNotWaitForSilentPeers(t *testing.T) {
	c := clustertest.New(t, 3)
	leader := c.WaitForLeader(clustertest.Timeout)
	mustSubmit(t, leader, tick())
	var others []string
	for _, f := range c.Followers() {
		others = append(others, f.NodeID())
	}
	c.Freeze(others...)
	// Once it has lost its lease, its heartbeats to the others are
	// stuck on connections that carry nothing.
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if leader.IsLeader() {
			return errors.New("still leads")
		}
		return nil
	})
	start := time.Now()
	c.Kill(c.Index(leader.NodeID()))
	// The transport's timeout is 10 s; what it waits for is gone at once.
	if took := time.Since(start); took >= 5*time.Second {
		t.Fatalf("closing the node took %v: it waited for peers that do not answer", took)
	}
	c.Heal()
}
