package cluster_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/broker"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
	pb "google.golang.org/protobuf/proto"
)

// A placed queue under a policy's expires expires as RabbitMQ's does:
// its lease runs out in its group's log, where its uses are, which ends
// it there (its messages gone, a passive declare 404), and the metadata
// log then deletes it with its bindings. A declare that meets the queue
// ended before the metadata dropped it waits for that and declares it
// anew, empty: the test holds the metadata's delete back until the
// declare has met the ended queue at least once.
func TestLeases_APlacedQueueExpiresInItsGroupThenLeavesTheMetadata(t *testing.T) {
	c := placedCluster(t, 0)
	n0 := c.Nodes[0].Node()
	b := broker.New(n0, nil)
	ctx := ctxT(t, clustertest.Timeout)
	submit := func(cmd *proto.Command) *proto.Result {
		t.Helper()
		r, err := b.Submit(ctx, cmd)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	declare := func(passive bool) *proto.Command {
		return &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "lq", Durable: true, Passive: passive}}}
	}
	restore := cluster.HoldCommands(func(c *proto.Command) bool { return c.GetQueueLeaseEnded() != nil })
	defer restore()

	mustOK := func(what string, r *proto.Result) {
		t.Helper()
		if r.GetCode() != 0 {
			t.Fatalf("%s: %d %s", what, r.GetCode(), r.GetText())
		}
	}
	mustOK("declare", submit(declare(false)))
	mustOK("bind", submit(&proto.Command{Cmd: &proto.Command_Bind{Bind: &proto.Bind{Vhost: "/", Source: "amq.direct", Destination: "lq", RoutingKey: "k"}}}))
	for i := range 3 {
		mustOK("publish", submit(publish("/", "lq", fmt.Sprint(i))))
	}
	group, first, _ := recordOf(n0, "lq")
	mustOK("policy", submit(&proto.Command{Cmd: &proto.Command_PolicySet{PolicySet: &proto.PolicySet{Vhost: "/", Name: "exp", Pattern: "^lq$",
		ApplyTo: "queues", Definition: &proto.PolicyDefinition{Expires: pb.Int64(300)}}}}))

	for _, nd := range c.Live() {
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			ended := false
			nd.ViewGroup(group, func(m *fsm.Machine) { ended = m.Ended("/", "lq") })
			if _, at, ok := recordOf(nd, "lq"); !ended || !ok || at != first {
				return fmt.Errorf("%s: ended in %s %v, the metadata's record %d (%v)", nd.NodeID(), group, ended, at, ok)
			}
			return nil
		})
	}
	if r := submit(declare(true)); r.GetCode() != replycode.NotFound {
		t.Fatalf("a passive declare of the ended queue: %v, want 404", r)
	}
	passives := func() (n int) {
		if err := n0.GroupLogEntries(group, func(_ uint64, env *proto.Envelope) bool {
			for _, c := range env.GetCommands() {
				if d := c.GetQueueDeclare(); d.GetName() == "lq" && d.GetPassive() {
					n++
				}
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := passives()
	done := make(chan *proto.Result, 1)
	go func() {
		r, err := b.Submit(ctx, declare(false))
		if err != nil {
			r = &proto.Result{Code: 1, Text: err.Error()}
		}
		done <- r
	}()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if n := passives(); n <= before {
			return fmt.Errorf("the declare has not met the ended queue in its group yet (%d passive declares)", n)
		}
		return nil
	})
	restore()
	r := <-done
	if r.GetCode() != 0 || r.GetMessageCount() != 0 {
		t.Fatalf("declaring the queue again after its lease ended: %v, want declare-ok of an empty queue", r)
	}
	for _, nd := range c.Live() {
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			g, at, ok := recordOf(nd, "lq")
			if !ok || at == first {
				return fmt.Errorf("%s: the metadata's record of lq %d (%v), want a new one", nd.NodeID(), at, ok)
			}
			var held, ended bool
			var ready uint64
			nd.ViewGroup(g, func(m *fsm.Machine) {
				q, ok := m.Queue("/", "lq")
				held, ready, ended = ok, q.GetReady(), m.Ended("/", "lq")
			})
			if !held || ready != 0 || ended {
				return fmt.Errorf("%s: lq in %s held %v with %d ready, ended %v", nd.NodeID(), g, held, ready, ended)
			}
			if ended := func() (e bool) { nd.ViewGroup(group, func(m *fsm.Machine) { e = m.Ended("/", "lq") }); return }(); ended {
				return fmt.Errorf("%s: %s still keeps the ended name", nd.NodeID(), group)
			}
			var routed []string
			nd.View(func(m *fsm.Machine) { routed, _, _ = m.Route("/", "amq.direct", []string{"k"}, nil) })
			if len(routed) != 0 {
				return fmt.Errorf("%s: the expired queue's binding still routes to %v", nd.NodeID(), routed)
			}
			return nil
		})
	}
}

// A whole-cluster stop restarts the leases of a queue group's queues as
// the metadata's: the time the cluster was down does not count, so a
// placed queue under an expires policy does not end at the restart.
func TestLeases_AGroupsLeasesRestartAfterAWholeClusterStop(t *testing.T) {
	c := placedCluster(t, 0, clustertest.WithFakeClock(t0))
	b := broker.New(c.Nodes[0].Node(), nil)
	for _, cmd := range []*proto.Command{
		{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "lq", Durable: true}}},
		{Cmd: &proto.Command_PolicySet{PolicySet: &proto.PolicySet{Vhost: "/", Name: "exp", Pattern: "^lq$",
			ApplyTo: "queues", Definition: &proto.PolicyDefinition{Expires: pb.Int64(5000)}}}},
	} {
		if r, err := b.Submit(ctxT(t, clustertest.Timeout), cmd); err != nil || r.GetCode() != 0 {
			t.Fatalf("%v: %v %v", cmd, r, err)
		}
	}
	group, _, _ := recordOf(c.Nodes[0].Node(), "lq")
	// The group holds the policy before the stop: its lease runs there.
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		due := false
		c.Nodes[0].Node().ViewGroup(group, func(m *fsm.Machine) { _, due = m.NextLeaseDue() })
		if !due {
			return fmt.Errorf("no lease runs in %s yet", group)
		}
		return nil
	})

	for i := range c.Nodes {
		c.Kill(i)
	}
	c.AdvanceClock(time.Minute)
	for i := range c.Nodes {
		c.Restart(i)
	}
	c.WaitForLeader(clustertest.Timeout)
	n := c.Nodes[0].Node()
	var restartedAt int64
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		restartedAt = 0
		err := n.GroupLogEntries(group, func(_ uint64, env *proto.Envelope) bool {
			for _, cmd := range env.GetCommands() {
				if cmd.GetRestartLeases() != nil {
					restartedAt = env.GetStampMs()
				}
			}
			return true
		})
		if err != nil || restartedAt == 0 {
			return fmt.Errorf("no RestartLeases in %s's log (%v)", group, err)
		}
		return nil
	})
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		var due int64
		var ok, held bool
		n.ViewGroup(group, func(m *fsm.Machine) {
			due, ok = m.NextLeaseDue()
			_, held = m.Queue("/", "lq")
		})
		if !held || !ok || due != restartedAt+5000 {
			return fmt.Errorf("after the restart: lq held %v, lease due %d (%v), want %d", held, due, ok, restartedAt+5000)
		}
		return nil
	})
}

// A lease that ran out in a queue group reaches the metadata through a
// kill of the group's leader: the next leader finds the queue ended in
// its state and has the metadata delete it, and the replicas of both
// logs agree once the killed node is back. The test holds the
// metadata's delete back until the kill, so that the killed leader
// cannot have proposed it.
func TestLeases_ALeaseEndOutlivesAKillOfTheGroupsLeader(t *testing.T) {
	c := placedCluster(t, 0)
	restore := cluster.HoldCommands(func(c *proto.Command) bool { return c.GetQueueLeaseEnded() != nil })
	defer restore()
	b := broker.New(c.Nodes[0].Node(), nil)
	for _, cmd := range []*proto.Command{
		{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "lq", Durable: true}}},
		publish("/", "lq", "m"),
		{Cmd: &proto.Command_PolicySet{PolicySet: &proto.PolicySet{Vhost: "/", Name: "exp", Pattern: "^lq$",
			ApplyTo: "queues", Definition: &proto.PolicyDefinition{Expires: pb.Int64(300)}}}},
	} {
		if r, err := b.Submit(ctxT(t, clustertest.Timeout), cmd); err != nil || r.GetCode() != 0 {
			t.Fatalf("%v: %v %v", cmd, r, err)
		}
	}
	group, _, _ := recordOf(c.Nodes[0].Node(), "lq")
	for _, nd := range c.Live() {
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			ended := false
			nd.ViewGroup(group, func(m *fsm.Machine) { ended = m.Ended("/", "lq") })
			if !ended {
				return fmt.Errorf("%s: lq has not ended in %s", nd.NodeID(), group)
			}
			return nil
		})
	}
	killed := c.Index(groupLeader(t, c, group).NodeID())
	c.Kill(killed)
	restore()
	for _, nd := range c.Live() {
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			_, _, placed := recordOf(nd, "lq")
			var ended, held bool
			nd.ViewGroup(group, func(m *fsm.Machine) { ended, held = m.Ended("/", "lq"), m.HasQueue("/", "lq") })
			if placed || ended || held {
				return fmt.Errorf("%s: lq placed %v, ended %v, held %v in %s", nd.NodeID(), placed, ended, held, group)
			}
			return nil
		})
	}
	c.Restart(killed)
	c.AssertSameDigest(t)
	assertGroupDigests(t, c, group)
	if _, _, placed := recordOf(c.Nodes[killed].Node(), "lq"); placed {
		t.Fatal("the restarted leader still places lq")
	}
}

// recordOf is nd's metadata record of placed queue name in vhost "/".
func recordOf(nd *cluster.Node, name string) (group string, at uint64, ok bool) {
	nd.View(func(m *fsm.Machine) { group, at, ok = m.PlacedAt("/", name) })
	return group, at, ok
}
