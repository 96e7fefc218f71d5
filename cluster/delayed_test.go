package cluster_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clock"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

func delayedExchange(name, typ string) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{
		Vhost: "/", Name: name, Type: fsm.DelayedExchangeType, Durable: true,
		Arguments: &proto.Table{Fields: []*proto.Field{{Key: "x-delayed-type", Value: &proto.Value{Kind: &proto.Value_LongString{LongString: []byte(typ)}}}}},
	}}}
}

func bindQueue(x, q, key string) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_Bind{Bind: &proto.Bind{Vhost: "/", Source: x, Destination: q, RoutingKey: key}}}
}

func publishDelayed(x, key, body string, delay int64) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", Exchange: x, RoutingKey: key, Body: []byte(body),
		Properties: &proto.Properties{Headers: &proto.Table{Fields: []*proto.Field{{Key: "x-delay", Value: &proto.Value{Kind: &proto.Value_Int64{Int64: delay}}}}}}}}}
}

// submitAgain submits cmds through the current leader until they commit:
// with one node down, a slow machine may cost the leader its leadership
// (the outcome is then unknown, and a message may be held twice, which
// the tests using this tolerate). It returns the entry's index.
func submitAgain(t *testing.T, c *clustertest.Cluster, cmds ...*proto.Command) uint64 {
	t.Helper()
	var idx uint64
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		l := c.WaitForLeader(clustertest.Timeout)
		res, err := l.SubmitBatch(ctxT(t, 10*time.Second), cmds)
		if err != nil {
			return err
		}
		requireFSM(t, res)
		idx = res[0].GetIndex()
		return nil
	})
	return idx
}

func isRelease(c *proto.Command) bool { return c.GetReleaseDelayed() != nil }

// delayedCounts is what n holds: delayed messages and q's ready ones.
func delayedCounts(n *cluster.Node, q string) (delayed, ready uint64) {
	n.View(func(m *fsm.Machine) {
		delayed = m.Stats().Delayed
		if qi, ok := m.Queue("/", q); ok {
			ready = qi.GetReady()
		}
	})
	return delayed, ready
}

func setupDelayed(t *testing.T, c *clustertest.Cluster) *cluster.Node {
	t.Helper()
	l := c.WaitForLeader(clustertest.Timeout)
	waitDefaults(t, c, l)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		var level uint32
		l.View(func(m *fsm.Machine) { level = m.ProtocolLevel() })
		if level < fsm.Protocol {
			return fmt.Errorf("protocol level %d", level)
		}
		return nil
	})
	requireFSM(t, mustSubmit(t, l, delayedExchange("dx", "direct"), queueDeclare("/", "q"), bindQueue("dx", "q", "k")))
	return l
}

// A burst due in one millisecond is released at its due time, not a
// millisecond before, over bounded entries, each message once.
func TestCluster_DelayedReleasedAtDueTimeInBatches(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithFakeClock(t0))
	l := setupDelayed(t, c)
	const n = 2500
	var last []*proto.Result
	for i := 0; i < n; i += 250 {
		var cmds []*proto.Command
		for j := i; j < i+250; j++ {
			cmds = append(cmds, publishDelayed("dx", "k", fmt.Sprint(j), 2000))
		}
		last = mustSubmit(t, c.Followers()[0], cmds...)
		requireFSM(t, last)
	}
	due := entryStamp(t, l, last[0].GetIndex()) + 2000
	var next int64
	l.View(func(m *fsm.Machine) { next, _, _ = m.NextDelayed() })
	if next != due {
		t.Fatalf("next due %d, want %d", next, due)
	}

	c.AdvanceClock(1999 * time.Millisecond)
	c.WaitApplied(mustSubmit(t, l, tick())[0].GetIndex())
	if got := findCommands(t, l, isRelease); len(got) != 0 {
		t.Fatalf("released before the due time: %v", got)
	}
	if d, r := delayedCounts(l, "q"); d != n || r != 0 {
		t.Fatalf("delayed %d ready %d before the due time", d, r)
	}
	c.AdvanceClock(time.Millisecond)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		for _, x := range c.Live() {
			if d, r := delayedCounts(x, "q"); d != 0 || r != n {
				return fmt.Errorf("%s: delayed %d ready %d", x.NodeID(), d, r)
			}
		}
		return nil
	})
	rel := findCommands(t, l, isRelease)
	if len(rel) < n/fsm.DelayedReleaseBatch {
		t.Fatalf("%d releases for %d messages", len(rel), n)
	}
	for _, r := range rel {
		if r.stamp < due || r.cmd.GetReleaseDelayed().GetLimit() > fsm.DelayedReleaseBatch {
			t.Fatalf("release %+v (due %d)", r, due)
		}
	}
	c.AssertSameDigest(t)
}

// Delayed messages are released at their due times through a leader kill
// and a restart of every node: never before, never twice, none lost.
func TestCluster_DelayedThroughLeaderKillAndFullRestart(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithFakeClock(t0))
	l := setupDelayed(t, c)
	const n = 30
	var dues []int64
	for i := 1; i <= n; i++ {
		res := mustSubmit(t, c.Followers()[i%2], publishDelayed("dx", "k", fmt.Sprint(i), int64(i)*1000))
		requireFSM(t, res)
		dues = append(dues, entryStamp(t, l, res[0].GetIndex())+int64(i)*1000)
	}
	now := dues[0] - 1000
	dueBy := func(at int64) uint64 {
		k := uint64(0)
		for _, d := range dues {
			if d <= at {
				k++
			}
		}
		return k
	}
	// check waits until what is due is released, and never sees more.
	check := func() {
		t.Helper()
		want := dueBy(now)
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			for _, x := range c.Live() {
				d, r := delayedCounts(x, "q")
				if r > want {
					t.Fatalf("%s: %d released at %d, only %d due", x.NodeID(), r, now, want)
				}
				if r != want || d != n-want {
					return fmt.Errorf("%s: delayed %d ready %d, want %d released", x.NodeID(), d, r, want)
				}
			}
			return nil
		})
	}
	step := func(d time.Duration) {
		c.AdvanceClock(d)
		now += d.Milliseconds()
		check()
	}
	for range 8 {
		step(1250 * time.Millisecond)
	}
	c.Kill(c.Index(c.WaitForLeader(clustertest.Timeout).NodeID()))
	c.WaitForLeader(clustertest.Timeout)
	for range 6 {
		step(1250 * time.Millisecond)
	}
	for i := range c.Nodes {
		c.Kill(i)
	}
	// Down for five seconds: what fell due meanwhile is released once the
	// cluster is back, exactly once.
	c.AdvanceClock(5 * time.Second)
	now += 5000
	for i := range c.Nodes {
		c.Restart(i)
	}
	c.WaitForLeader(clustertest.Timeout)
	check()
	for now < dues[n-1] {
		step(1500 * time.Millisecond)
	}
	if d, r := delayedCounts(c.Leader(), "q"); d != 0 || r != n {
		t.Fatalf("delayed %d ready %d at the end", d, r)
	}
	c.AssertSameDigest(t)
}

// jumpingClock is a node's fake clock that calls jump as a timer is armed:
// time can then pass at the worst moment for a scheduler, after it read
// the time and before its timer counts.
type jumpingClock struct {
	*clustertest.FakeClock
	jump func(d time.Duration)
}

func (c jumpingClock) NewTimer(d time.Duration) clock.Timer {
	c.jump(d)
	return c.FakeClock.NewTimer(d)
}

// jumpAsArmed starts a cluster of three on fake clocks that, once the
// returned switch is on, step every node's clock past the wait of the
// next long timer a node arms (a due duty's, when no other duty has
// work), just as it is armed. The switch turns itself off when it steps.
func jumpAsArmed(t *testing.T) (*clustertest.Cluster, *atomic.Bool) {
	var (
		c     *clustertest.Cluster
		armed atomic.Bool
	)
	jump := func(d time.Duration) {
		if d >= 500*time.Millisecond && armed.CompareAndSwap(true, false) {
			c.AdvanceClock(d + 200*time.Millisecond)
		}
	}
	c = clustertest.New(t, 3, clustertest.WithFakeClock(t0), clustertest.WithConfig(func(_ int, cfg *cluster.Config) {
		cfg.Clock = jumpingClock{cfg.Clock.(*clustertest.FakeClock), jump}
	}))
	return c, &armed
}

// Time that passes between the scheduler's reading of log time and the
// arming of its timer does not hold the release until time passes again.
func TestCluster_DelayedReleasedWhenTimePassesAsItsTimerIsArmed(t *testing.T) {
	c, armed := jumpAsArmed(t)
	setupDelayed(t, c)
	armed.Store(true)
	requireFSM(t, mustSubmit(t, c.Followers()[0], publishDelayed("dx", "k", "m", 1000)))
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if armed.Load() {
			return fmt.Errorf("no timer armed for the release")
		}
		for _, x := range c.Live() {
			if d, r := delayedCounts(x, "q"); d != 0 || r != 1 {
				return fmt.Errorf("%s: delayed %d ready %d", x.NodeID(), d, r)
			}
		}
		return nil
	})
}

// A delayed message's body outlives the log prefix it was published in:
// a follower that was down installs the snapshot with it, and delivers it
// intact once released.
func TestCluster_DelayedBodiesSurviveCompactionAndInstall(t *testing.T) {
	for _, store := range []string{cluster.LogStoreWAL, cluster.LogStoreBolt} {
		t.Run(store, func(t *testing.T) { testDelayedBodies(t, store) })
	}
}

func testDelayedBodies(t *testing.T, store string) {
	sinks := []*deliveries{{}, {}, {}}
	c := clustertest.New(t, 3, clustertest.WithFakeClock(t0), clustertest.WithSnapshotThreshold(32),
		clustertest.WithConfig(func(i int, c *cluster.Config) {
			c.LogStore = store
			c.Effects = sinks[i]
		}))
	l := setupDelayed(t, c)
	victim := c.Followers()[0]
	vi := c.Index(victim.NodeID())
	c.Kill(vi)
	var want []string
	var lastPublish uint64
	for i := 0; i < 60; i += 3 {
		var cmds []*proto.Command
		for j := i; j < i+3; j++ {
			want = append(want, bodyOf(j))
			cmds = append(cmds, publishDelayed("dx", "k", bodyOf(j), 60000))
		}
		lastPublish = submitAgain(t, c, cmds...)
	}
	for range 100 {
		submitAgain(t, c, tick())
	}
	l = c.WaitForLeader(clustertest.Timeout)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if s := l.Stats(); s.LastSnapshotIndex < lastPublish+50 {
			return fmt.Errorf("leader snapshot at %d", s.LastSnapshotIndex)
		}
		return nil
	})
	c.Restart(vi)
	back := c.Nodes[vi].Node()
	c.WaitApplied(mustSubmit(t, l, tick())[0].GetIndex())
	c.AssertSameDigest(t)
	if store == cluster.LogStoreBolt {
		awaitInstalledSnapshot(t, back)
	}

	ch := &proto.ChannelRef{Node: back.NodeID(), Connection: "c", Channel: 1}
	mustSubmit(t, l, &proto.Command{Cmd: &proto.Command_Consume{Consume: &proto.Consume{Vhost: "/", Queue: "q", NoAck: true,
		Consumer: &proto.ConsumerRef{Channel: ch, Tag: "t"}}}})
	c.AdvanceClock(time.Minute)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if m := sinks[vi].missing(want); len(m) > 0 {
			return fmt.Errorf("%d of %d bodies not delivered intact on %s", len(m), len(want), back.NodeID())
		}
		return nil
	})
	c.AssertSameDigest(t)
}

// A frozen leader and then a partitioned one: the majority's new leader
// releases what falls due, the cut-off one releases nothing that commits
// a second time, and after healing every replica holds each message once.
func TestCluster_DelayedThroughFreezeAndPartition(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithFakeClock(t0))
	l := setupDelayed(t, c)
	const n = 12
	var dues []int64
	for i := 1; i <= n; i++ {
		res := mustSubmit(t, l, publishDelayed("dx", "k", fmt.Sprint(i), int64(i)*1000))
		requireFSM(t, res)
		dues = append(dues, entryStamp(t, l, res[0].GetIndex())+int64(i)*1000)
	}
	now := dues[0] - 1000
	// settled waits until the nodes hold exactly what is due at now
	// released, and fails if one ever holds more.
	settled := func(nodes []*cluster.Node) {
		t.Helper()
		want := uint64(0)
		for _, d := range dues {
			if d <= now {
				want++
			}
		}
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			for _, x := range nodes {
				d, r := delayedCounts(x, "q")
				if r > want {
					t.Fatalf("%s: %d released at %d, only %d due", x.NodeID(), r, now, want)
				}
				if r != want || d != n-want {
					return fmt.Errorf("%s: delayed %d ready %d, want %d released", x.NodeID(), d, r, want)
				}
			}
			return nil
		})
	}
	others := func(id string) []*cluster.Node {
		var out []*cluster.Node
		for _, x := range c.Live() {
			if x.NodeID() != id {
				out = append(out, x)
			}
		}
		return out
	}
	advance := func(d time.Duration) {
		c.AdvanceClock(d)
		now += d.Milliseconds()
	}
	advance(1500 * time.Millisecond)
	settled(c.Live())

	for _, cut := range []func(ids ...string){c.Freeze, c.Partition} {
		old := c.WaitForLeader(clustertest.Timeout)
		cut(old.NodeID())
		rest := others(old.NodeID())
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			for _, x := range rest {
				if x.IsLeader() {
					return nil
				}
			}
			return fmt.Errorf("no leader among the others")
		})
		advance(2500 * time.Millisecond)
		settled(rest)
		c.Heal()
		settled(c.Live())
	}
	for now < dues[n-1] {
		advance(2 * time.Second)
		settled(c.Live())
	}
	c.AssertSameDigest(t)
}

// While a server announces level 5 (the release before delayed
// exchanges), an x-delayed-message declare is refused as an unknown type
// and ReleaseDelayed is not proposed; once it is upgraded, the level is
// raised and the exchange works.
func TestCluster_DelayedWaitsForEveryServerAtLevel6(t *testing.T) {
	const old = 2
	c := clustertest.New(t, 3, clustertest.WithFakeClock(t0), clustertest.WithConfig(func(i int, cfg *cluster.Config) {
		if i == old {
			cfg.Protocol = 5
		}
	}))
	l := c.WaitForLeader(clustertest.Timeout)
	waitDefaults(t, c, l)
	waitLevel(t, c, 5)
	res := mustSubmit(t, l, delayedExchange("dx", "direct"))
	if res[0].GetCode() != 503 || res[0].GetText() != "COMMAND_INVALID - unknown exchange type 'x-delayed-message'" {
		t.Fatalf("declare at level 5: %v", res[0])
	}
	rel, err := l.SubmitBatch(ctxT(t, 10*time.Second), []*proto.Command{{Cmd: &proto.Command_ReleaseDelayed{ReleaseDelayed: &proto.ReleaseDelayed{Limit: 1}}}})
	if err != nil || rel[0].GetCode() != 540 {
		t.Fatalf("ReleaseDelayed while a server announces 5: %v %v, want 540", rel, err)
	}

	c.Kill(old)
	c.Nodes[old].Config.Protocol = fsm.Protocol
	c.Restart(old)
	waitLevel(t, c, fsm.Protocol)
	l = c.WaitForLeader(clustertest.Timeout)
	requireFSM(t, mustSubmit(t, l, delayedExchange("dx", "direct"), queueDeclare("/", "q"), bindQueue("dx", "q", "k")))
	requireFSM(t, mustSubmit(t, c.Nodes[old].Node(), publishDelayed("dx", "k", "m", 100)))
	c.AdvanceClock(100 * time.Millisecond)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		for _, x := range c.Live() {
			if d, r := delayedCounts(x, "q"); d != 0 || r != 1 {
				return fmt.Errorf("%s: delayed %d ready %d", x.NodeID(), d, r)
			}
		}
		return nil
	})
	c.AssertSameDigest(t)
}
