package cluster_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/group"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

// groupLeader is the node that leads queue group id, as every member
// that runs it agrees.
func groupLeader(t *testing.T, c *clustertest.Cluster, id string) *cluster.Node {
	t.Helper()
	var l *cluster.Node
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		l = nil
		leader := ""
		for _, n := range c.Live() {
			for _, g := range n.Groups() {
				if g.ID != id {
					continue
				}
				if g.Leader == "" || leader != "" && g.Leader != leader {
					return fmt.Errorf("group %s: leaders %q and %q", id, leader, g.Leader)
				}
				leader = g.Leader
			}
		}
		for _, n := range c.Live() {
			if n.NodeID() == leader {
				l = n
			}
		}
		if l == nil {
			return fmt.Errorf("group %s has no live leader (%q)", id, leader)
		}
		return nil
	})
	return l
}

// groupQueue is queue name of "/" in group id as n has applied it.
func groupQueue(n *cluster.Node, id, name string) (*proto.QueueInfo, error) {
	var q *proto.QueueInfo
	var ok bool
	if !n.ViewGroup(id, func(m *fsm.Machine) { q, ok = m.Queue("/", name) }) {
		return nil, fmt.Errorf("%s does not run group %s", n.NodeID(), id)
	}
	if !ok {
		return nil, fmt.Errorf("%s: no queue %s in group %s", n.NodeID(), name, id)
	}
	return q, nil
}

// A queue group's leader decides the time duties of its queues in the
// group's own log, as the metadata leader does in its: messages die at
// their TTL and a queue unused for its x-expires goes, by log time, and
// a new leader of the group takes over where a killed one left off. The
// metadata log holds none of it.
func TestQueueGroups_LeaderDecidesItsQueuesTimeDuties(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithFakeClock(t0), clustertest.WithConfig(following(3)))
	c.WaitForLeader(clustertest.Timeout)
	waitQueueGroups(t, c, queueGroupIDs)
	const id = "q1"
	// The group's log reaches the level of Enqueue from its leader.
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		for _, n := range c.Live() {
			var level uint32
			n.ViewGroup(id, func(m *fsm.Machine) { level = m.ProtocolLevel() })
			if level < fsm.GroupsLevel {
				return fmt.Errorf("%s: group %s at level %d", n.NodeID(), id, level)
			}
		}
		return nil
	})
	gl := groupLeader(t, c, id)
	submit := func(n *cluster.Node, cmds ...*proto.Command) []*proto.Result {
		t.Helper()
		res, err := n.SubmitGroup(ctxT(t, clustertest.Timeout), id, cmds)
		if err != nil {
			t.Fatal(err)
		}
		requireFSM(t, res)
		return res
	}
	submit(gl, &proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}},
		declareWithArgs("g-ttl", int32Arg("x-message-ttl", 2000)),
		declareWithArgs("g-lease", int32Arg("x-expires", 3000)))
	for i := range 10 {
		submit(gl, fsmtest.Enqueue("/", "", "g-ttl", fmt.Sprint(i), &proto.Properties{}, "g-ttl"))
	}
	if _, err := groupQueue(c.Leader(), group.DefaultID, "g-ttl"); err == nil {
		t.Fatal("the metadata log holds the group's queue")
	}

	// Halfway to the deadline the group's leader is killed; another
	// member leads the group on, with the same clock.
	c.AdvanceClock(time.Second)
	submit(gl, tick())
	c.Kill(c.Index(gl.NodeID()))
	nl := groupLeader(t, c, id)
	submit(nl, tick())
	for _, n := range c.Live() {
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			q, err := groupQueue(n, id, "g-ttl")
			if err == nil && q.GetReady() != 10 {
				err = fmt.Errorf("%s: %d messages before their TTL", n.NodeID(), q.GetReady())
			}
			return err
		})
	}
	c.AdvanceClock(time.Second)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		for _, n := range c.Live() {
			q, err := groupQueue(n, id, "g-ttl")
			if err != nil {
				return err
			}
			if q.GetReady() != 0 {
				return fmt.Errorf("%s: %d messages past their TTL", n.NodeID(), q.GetReady())
			}
		}
		return nil
	})
	c.AdvanceClock(time.Second)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		for _, n := range c.Live() {
			if _, err := groupQueue(n, id, "g-lease"); err == nil {
				return fmt.Errorf("%s: g-lease outlived its x-expires", n.NodeID())
			}
			if _, err := groupQueue(n, id, "g-ttl"); err != nil {
				return err
			}
		}
		return nil
	})
	assertGroupDigests(t, c, id)
}

// assertGroupDigests fails t unless every live member of group id comes
// to the same digest of it.
func assertGroupDigests(t *testing.T, c *clustertest.Cluster, id string) {
	t.Helper()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		var first [32]byte
		seen := 0
		for _, n := range c.Live() {
			var d [32]byte
			var applied uint64
			if !n.ViewGroup(id, func(m *fsm.Machine) { d, applied = m.Digest(), m.AppliedIndex() }) {
				continue
			}
			if seen > 0 && d != first {
				return fmt.Errorf("group %s: %s's digest at %d differs", id, n.NodeID(), applied)
			}
			first = d
			seen++
		}
		if seen == 0 {
			return errors.New("no live member")
		}
		return nil
	})
}

// A message that dies in a queue of a queue group into an exchange only
// the metadata group holds leaves through the group's outbox: the group's
// leader routes it on the metadata group's bindings, hands it to the
// metadata group keyed by (group, key), and forgets it once that
// committed. Through a kill of the group's leader halfway, every dead
// letter arrives exactly once, and the outbox ends empty on every member.
func TestQueueGroups_DeadLettersCrossIntoTheMetadataGroupOnce(t *testing.T) {
	deadLettersCrossOnce(t, &proto.ExchangeDeclare{Vhost: "/", Name: "dlx", Type: "fanout", Durable: true}, func(i int) *proto.Properties {
		return &proto.Properties{MessageId: ptrTo(fmt.Sprint(i))}
	})
}

// The same through an x-delayed-message dead-letter exchange, every other
// message with an x-delay header: those the group hands to the metadata
// log whole, which holds them until due; the others it routes itself.
// Through the kill each arrives once, and nothing is left held.
func TestQueueGroups_DeadLettersThroughADelayedExchangeCrossOnce(t *testing.T) {
	deadLettersCrossOnce(t, &proto.ExchangeDeclare{Vhost: "/", Name: "dlx", Type: fsm.DelayedExchangeType, Durable: true,
		Arguments: &proto.Table{Fields: []*proto.Field{strArg("x-delayed-type", "fanout")}}}, func(i int) *proto.Properties {
		p := &proto.Properties{MessageId: ptrTo(fmt.Sprint(i))}
		if i%2 == 0 {
			p.Headers = &proto.Table{Fields: []*proto.Field{int32Arg("x-delay", 50)}}
		}
		return p
	})
}

// deadLettersCrossOnce publishes into a queue of group q2 that keeps one
// message, the others dying into dlx (declared by x, a fanout's routing)
// and bound to queue dead of the metadata group, killing the group's
// leader halfway: each dead letter arrives in dead once.
func deadLettersCrossOnce(t *testing.T, x *proto.ExchangeDeclare, props func(int) *proto.Properties) {
	c := clustertest.New(t, 3, clustertest.WithConfig(following(3)))
	l := c.WaitForLeader(clustertest.Timeout)
	waitDefaults(t, c, l)
	waitQueueGroups(t, c, queueGroupIDs)
	const id = "q2"
	requireFSM(t, mustSubmit(t, l,
		&proto.Command{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: x}},
		declareWithArgs("dead"),
		&proto.Command{Cmd: &proto.Command_Bind{Bind: &proto.Bind{Vhost: "/", Source: "dlx", Destination: "dead"}}}))
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		for _, n := range c.Live() {
			var g uint32
			n.ViewGroup(id, func(m *fsm.Machine) { g = m.Group() })
			if g == 0 {
				return fmt.Errorf("%s: group %s has no number yet", n.NodeID(), id)
			}
		}
		return nil
	})
	gl := groupLeader(t, c, id)
	submit := groupSubmitter(t, c, id)
	// One message kept: each one more pushes the oldest out, dead.
	submit(&proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}},
		declareWithArgs("src", int32Arg("x-max-length", 1), strArg("x-dead-letter-exchange", "dlx")))
	const total = 60
	for i := range total {
		if i == total/2 {
			c.Kill(c.Index(gl.NodeID()))
		}
		submit(fsmtest.Enqueue("/", "", "src", fmt.Sprint(i), props(i), "src"))
	}
	clustertest.Eventually(t, 2*clustertest.Timeout, func() error {
		for _, n := range c.Live() {
			var dead *proto.QueueInfo
			n.View(func(m *fsm.Machine) { dead, _ = m.Queue("/", "dead") })
			var out int
			var num uint32
			// An Enqueue whose outcome the kill left unknown was sent
			// again, and may be in the log twice: every one in the log
			// but the last dies, and arrives once.
			var published uint64
			n.ViewGroup(id, func(m *fsm.Machine) { out, num, published = m.OutboxLen(), m.Group(), m.Stats().Published })
			if published < total {
				return fmt.Errorf("%s: %d published into %s, want at least %d", n.NodeID(), published, id, total)
			}
			want := published - 1
			if dead.GetReady() != want || out != 0 {
				return fmt.Errorf("%s: %d dead letters in the metadata group (want %d), %d in %s's outbox", n.NodeID(), dead.GetReady(), want, out, id)
			}
			var missing []uint64
			var held uint64
			n.View(func(m *fsm.Machine) {
				held = m.Stats().Delayed
				for k := uint64(1); k <= want; k++ {
					if !m.HandedOff(num, k) {
						missing = append(missing, k)
					}
				}
			})
			if len(missing) > 0 || held != 0 {
				return fmt.Errorf("%s: keys %v not handed off, %d held", n.NodeID(), missing, held)
			}
		}
		return nil
	})
	assertGroupDigests(t, c, id)
	c.AssertSameDigest(t)
}

func strArg(key, v string) *proto.Field {
	return &proto.Field{Key: key, Value: &proto.Value{Kind: &proto.Value_LongString{LongString: []byte(v)}}}
}

// A killed node's channels lose what they held in every queue group, not
// only in the metadata log: the metadata leader declares the node down in
// each group it runs, and the group requeues its deliveries there.
func TestQueueGroups_NodeDownFreesWhatTheNodeHeldInTheGroup(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithConfig(following(3)))
	const id = "q2"
	victim := holdInGroup(t, c, id, 20)
	gl := groupLeader(t, c, id)
	unacked := func(n *cluster.Node) (uint64, error) {
		q, err := groupQueue(n, id, "held")
		if err != nil {
			return 0, err
		}
		return q.GetUnacked(), nil
	}
	mustHoldAll(t, gl, id, 20)
	c.Kill(c.Index(victim.NodeID()))
	for _, n := range c.Live() {
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			if u, err := unacked(n); err != nil || u != 0 {
				return fmt.Errorf("%s: %d still held in group %s (%v)", n.NodeID(), u, id, err)
			}
			return nil
		})
	}
}

// A node killed and started again before the leader declares it down
// releases its previous run's consumers in every queue group it is a
// member of before it takes clients, not only in the metadata log: no
// one else would, and what they held would wait for ever.
func TestQueueGroups_ARestartedNodeReleasesItsPastInEachGroup(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithConfig(func(i int, cfg *cluster.Config) {
		following(3)(i, cfg)
		cfg.NodeDownAfter = time.Hour // the leader never declares it down
	}))
	const id = "q3"
	victim := holdInGroup(t, c, id, 10)
	mustHoldAll(t, groupLeader(t, c, id), id, 10)
	vi := c.Index(victim.NodeID())
	c.Restart(vi)
	back := c.Nodes[vi].Node()
	select {
	case <-back.Ready():
	case <-time.After(clustertest.Timeout):
		t.Fatal("the restarted node never became ready")
	}
	for _, n := range c.Live() {
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			q, err := groupQueue(n, id, "held")
			if err != nil {
				return err
			}
			if q.GetUnacked() != 0 || q.GetConsumers() != 0 {
				return fmt.Errorf("%s: the previous run still holds %d and has %d consumers in %s", n.NodeID(), q.GetUnacked(), q.GetConsumers(), id)
			}
			return nil
		})
	}
}

// holdInGroup declares queue "held" in queue group id, with a consumer of
// a channel of a node that leads neither the metadata group nor id (when
// there is one), and gives it k messages it does not acknowledge; it
// returns that node.
func holdInGroup(t *testing.T, c *clustertest.Cluster, id string, k int) *cluster.Node {
	t.Helper()
	l := c.WaitForLeader(clustertest.Timeout)
	waitQueueGroups(t, c, queueGroupIDs)
	gl := groupLeader(t, c, id)
	var victim *cluster.Node
	for _, n := range c.Live() {
		if n != l && n != gl {
			victim = n
		}
	}
	if victim == nil {
		// The metadata group and id share a leader on one node: any
		// other node will do.
		victim = c.Followers()[0]
	}
	submit := groupSubmitter(t, c, id)
	submit(&proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}}, declareWithArgs("held"))
	submit(consumeOn(&proto.ChannelRef{Node: victim.NodeID(), Connection: "conn-1", Channel: 1}, "held", "ctag", 100))
	for i := range k {
		submit(fsmtest.Enqueue("/", "", "held", fmt.Sprint(i), &proto.Properties{}, "held"))
	}
	return victim
}

// mustHoldAll checks that the consumer of queue "held" in group id, as n
// applied it, holds every message of the queue, at least k. An Enqueue
// whose outcome a leader change left unknown was sent again by
// groupSubmitter and may be in the log twice, so more is no failure.
func mustHoldAll(t *testing.T, n *cluster.Node, id string, k uint64) {
	t.Helper()
	q, err := groupQueue(n, id, "held")
	if err != nil || q.GetReady() != 0 || q.GetUnacked() < k {
		t.Fatalf("the consumer holds %d with %d ready (%v), want all of at least %d", q.GetUnacked(), q.GetReady(), err, k)
	}
}

// groupSubmitter submits commands to queue group id's leader, whichever
// node leads it at the time, until one try commits; a refusal fails the
// test.
func groupSubmitter(t *testing.T, c *clustertest.Cluster, id string) func(cmds ...*proto.Command) {
	return func(cmds ...*proto.Command) {
		t.Helper()
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			res, err := groupLeader(t, c, id).SubmitGroup(ctxT(t, clustertest.Timeout), id, cmds)
			if err != nil {
				return err
			}
			requireFSM(t, res)
			return nil
		})
	}
}
