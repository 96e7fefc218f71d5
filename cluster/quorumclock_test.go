package cluster_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// maxEarly is how far log time may run ahead of the quorum's clocks: a
// message may die at most this long before its deadline as they see it.
const maxEarly = 500 * time.Millisecond

// clockRun drives a three-node cluster whose fake clocks only the test
// moves. truth is what the good clocks read; node i's oscillator runs at
// rate[i] (its wall and monotonic clocks both). After every step one tick
// goes through the log, so each entry's place in the log tells what the
// good clocks read when it was stamped: at least the truth of the tick
// before it.
type clockRun struct {
	t     *testing.T
	c     *clustertest.Cluster
	truth time.Time
	rate  []float64
	chunk time.Duration // the longest step between ticks, at most maxEarly
	ticks []clockTick
	// hasDelayed: the delayed exchange dx and its queue dq are declared.
	hasDelayed bool
	msgs       []ttlMsg
}

type clockTick struct {
	index uint64
	truth time.Time
	stamp int64
}

// ttlMsg is a message with a TTL, a queue with an x-expires lease
// (lease), or a message an x-delayed-message exchange holds for ttl
// (delayed: its entry and stamp), and what the good clocks read when it
// was published or declared.
type ttlMsg struct {
	queue     string
	published time.Time
	ttl       time.Duration
	lease     bool
	delayed   bool
	index     uint64
	stamp     int64
}

func newClockRun(t *testing.T, opts ...clustertest.Option) *clockRun {
	c := clustertest.New(t, 3, append(opts, clustertest.WithFakeClock(t0))...)
	l := c.WaitForLeader(clustertest.Timeout)
	waitDefaults(t, c, l)
	r := &clockRun{t: t, c: c, truth: t0, rate: []float64{1, 1, 1}, chunk: 100 * time.Millisecond}
	r.tick()
	return r
}

// step lets d pass on every clock in steps of r.chunk, with a tick after
// each.
func (r *clockRun) step(d time.Duration) {
	r.t.Helper()
	for d > 0 {
		s := min(d, r.chunk)
		d -= s
		for i, nd := range r.c.Nodes {
			nd.Clock.Advance(time.Duration(float64(s) * r.rate[i]))
		}
		r.truth = r.truth.Add(s)
		r.tick()
	}
}

// tick puts a tick through the log and checks its stamp against the good
// clocks: log time is never more than maxEarly ahead of them (a message
// would die early) nor behind (log time standing still).
func (r *clockRun) tick() {
	r.t.Helper()
	n := r.c.Live()[0]
	var res *proto.Result
	for {
		var err error
		res, err = n.Submit(ctxT(r.t, 10*time.Second), tick())
		if err == nil {
			break
		}
		// A tick is a marker: one lost in a leadership hand-over is
		// simply sent again.
		if !errors.Is(err, cluster.ErrOutcomeUnknown) {
			r.t.Fatalf("tick on %s: %v", n.NodeID(), err)
		}
	}
	tk := clockTick{index: res.GetIndex(), truth: r.truth, stamp: entryStamp(r.t, n, res.GetIndex())}
	r.ticks = append(r.ticks, tk)
	if off := time.Duration(tk.stamp-r.truth.UnixMilli()) * time.Millisecond; off > maxEarly || off < -maxEarly {
		l := r.c.Leader()
		r.t.Fatalf("entry %d stamped %v off the quorum's clocks (leader %s)", tk.index, off, l.NodeID())
	}
}

// publish declares a queue with a message TTL and puts one message in it.
func (r *clockRun) publish(ttl time.Duration) {
	r.t.Helper()
	q := fmt.Sprintf("ttl-%d", len(r.msgs))
	// One entry: found in the log, the queue holds its message.
	r.submitOnce(func(c *proto.Command) bool { return c.GetQueueDeclare().GetName() == q },
		declareWithArgs(q, int32Arg("x-message-ttl", int32(ttl.Milliseconds()))), publishTo(q, "m"))
	r.msgs = append(r.msgs, ttlMsg{queue: q, published: r.truth, ttl: ttl})
}

// lease declares a queue with an x-expires lease, never used.
func (r *clockRun) lease(ttl time.Duration) {
	r.t.Helper()
	q := fmt.Sprintf("lease-%d", len(r.msgs))
	r.submitOnce(func(c *proto.Command) bool { return c.GetQueueDeclare().GetName() == q },
		declareWithArgs(q, int32Arg("x-expires", int32(ttl.Milliseconds()))))
	r.msgs = append(r.msgs, ttlMsg{queue: q, published: r.truth, ttl: ttl, lease: true})
}

// delay publishes a message through an x-delayed-message exchange with
// an x-delay of d.
func (r *clockRun) delay(d time.Duration) {
	r.t.Helper()
	n := r.c.Live()[0]
	if !r.hasDelayed {
		clustertest.Eventually(r.t, clustertest.Timeout, func() error {
			var level uint32
			n.View(func(m *fsm.Machine) { level = m.ProtocolLevel() })
			if level < fsm.Protocol {
				return fmt.Errorf("protocol level %d", level)
			}
			return nil
		})
		r.submitOnce(func(c *proto.Command) bool { return c.GetExchangeDeclare().GetName() == "dx" },
			delayedExchange("dx", "direct"), queueDeclare("/", "dq"), bindQueue("dx", "dq", "k"))
		r.hasDelayed = true
	}
	body := fmt.Sprintf("delayed-%d", len(r.msgs))
	e := r.submitOnce(func(c *proto.Command) bool { return string(c.GetPublish().GetBody()) == body },
		publishDelayed("dx", "k", body, d.Milliseconds()))
	r.msgs = append(r.msgs, ttlMsg{queue: "dq", published: r.truth, ttl: d, delayed: true, index: e.index, stamp: e.stamp})
}

// submitOnce puts cmds into the log as one entry, exactly once, and
// returns that entry. A leader whose clock is wrong hands leadership on
// at once, so a submission may meet the hand-over and not know whether
// it committed; mine tells the entry in the log, and it is sent again
// only if a tick committed since shows it is not there.
func (r *clockRun) submitOnce(mine func(*proto.Command) bool, cmds ...*proto.Command) stampedCmd {
	r.t.Helper()
	for {
		n := r.c.Live()[0]
		res, err := n.SubmitBatch(ctxT(r.t, 10*time.Second), cmds)
		if err == nil {
			requireFSM(r.t, res)
			checkResults(r.t, n, cmds, res)
			return stampedCmd{res[0].GetIndex(), entryStamp(r.t, n, res[0].GetIndex()), cmds[0]}
		}
		if !errors.Is(err, cluster.ErrOutcomeUnknown) {
			r.t.Fatalf("submit on %s: %v", n.NodeID(), err)
		}
		// A leader commits the entries of earlier terms it holds with its
		// first own one: once a tick has applied, the outcome is settled
		// on the node that applied it.
		r.tick()
		if found := findCommands(r.t, r.c.Live()[0], mine); len(found) > 0 {
			return found[0]
		}
	}
}

// leader returns the index of the leader once there is one.
func (r *clockRun) leader() int {
	r.t.Helper()
	return r.c.Index(r.c.WaitForLeader(clustertest.Timeout).NodeID())
}

// lead makes node i the leader.
func (r *clockRun) lead(i int) {
	r.t.Helper()
	clustertest.Eventually(r.t, clustertest.Timeout, func() error {
		l := r.c.WaitForLeader(clustertest.Timeout)
		if l.NodeID() == r.c.Nodes[i].ID {
			return nil
		}
		_ = l.TransferLeadership(r.c.Nodes[i].ID)
		return fmt.Errorf("%s leads, not %s", l.NodeID(), r.c.Nodes[i].ID)
	})
}

// awaitHandedOver waits until node bad is not the leader and says why.
func (r *clockRun) awaitHandedOver(bad int, why string) {
	r.t.Helper()
	clustertest.Eventually(r.t, clustertest.Timeout, func() error {
		if l := r.c.WaitForLeader(clustertest.Timeout); l.NodeID() == r.c.Nodes[bad].ID {
			return fmt.Errorf("%s, whose clock is off, still leads", l.NodeID())
		}
		if p := r.c.Nodes[bad].Node().ClockProblem(); !strings.Contains(p, why) {
			return fmt.Errorf("%s reports clock problem %q, want %q", r.c.Nodes[bad].ID, p, why)
		}
		return nil
	})
	for i, nd := range r.c.Nodes {
		if n := nd.Node(); n != nil && i != bad && n.ClockProblem() != "" {
			p := n.ClockProblem()
			r.t.Fatalf("%s, whose clock is good, reports %q", nd.ID, p)
		}
	}
}

// checkRate lets d pass and checks that log time moved by d, give or
// take 150 ms and a step: the clocks move a step at once, so a reading
// of a voter's clock that a step overtakes in flight is off by up to a
// step, and so is log time anchored to it (the drift test, in steps of
// 250 ms, saw log time 260 ms ahead where a hand-over left it, and it
// moved that much less while the next leader's clock caught up).
func (r *clockRun) checkRate(d time.Duration) {
	r.t.Helper()
	from := r.ticks[len(r.ticks)-1]
	r.step(d)
	to := r.ticks[len(r.ticks)-1]
	moved := time.Duration(to.stamp-from.stamp) * time.Millisecond
	if off, most := moved-to.truth.Sub(from.truth), r.chunk+150*time.Millisecond; off > most || off < -most {
		r.t.Fatalf("log time moved %v while %v passed", moved, to.truth.Sub(from.truth))
	}
}

// checkDeaths waits until every message has died, every lease fell due
// and every delayed message was released, and checks that none did more
// than maxEarly before its deadline as the good clocks see it.
func (r *clockRun) checkDeaths() {
	r.t.Helper()
	n := r.c.Live()[0]
	for _, m := range r.msgs {
		if r.truth.Before(m.published.Add(m.ttl)) {
			r.t.Fatalf("the run ended before %s's deadline", m.queue)
		}
		match := isExpireOf(m.queue)
		if m.lease {
			match = func(cmd *proto.Command) bool { return cmd.GetExpireQueue().GetQueue().GetName() == m.queue }
		}
		if m.delayed {
			// ReleaseDelayed names no message: this one's is the first
			// after it stamped at or past its due time.
			match = func(cmd *proto.Command) bool { return cmd.GetReleaseDelayed() != nil }
		}
		var death uint64
		clustertest.Eventually(r.t, clustertest.Timeout, func() error {
			for _, c := range findCommands(r.t, n, match) {
				if !m.delayed || (c.index > m.index && c.stamp >= m.stamp+m.ttl.Milliseconds()) {
					death = c.index
					return nil
				}
			}
			return fmt.Errorf("%s: not dead or released in the log", m.queue)
		})
		var before clockTick
		for _, tk := range r.ticks {
			if tk.index < death {
				before = tk
			}
		}
		if early := m.published.Add(m.ttl).Sub(before.truth); early > maxEarly {
			r.t.Errorf("%s (ttl %v) died %v before its deadline", m.queue, m.ttl, early)
		}
	}
	clustertest.Eventually(r.t, clustertest.Timeout, func() error { return noDeadlines(r.c) })
	for _, n := range r.c.Live() {
		assertMonotonicLog(r.t, n)
	}
}

// testBadLeaderClock makes node bad's wall clock wrong by off: before it
// leads when atStart (leadership is then handed to it, as after a
// failover), else while it leads, after messages were published.
func testBadLeaderClock(t *testing.T, off time.Duration, atStart bool, why string) {
	r := newClockRun(t)
	bad := r.leader()
	if atStart {
		bad = (bad + 1) % len(r.c.Nodes)
		r.c.Nodes[bad].Clock.Step(off)
		// Leadership goes to it; with its clock off it hands it on at
		// once, but not before the log could see its clock.
		if err := r.c.WaitForLeader(clustertest.Timeout).TransferLeadership(r.c.Nodes[bad].ID); err != nil {
			t.Fatal(err)
		}
	}
	r.publish(time.Second)
	r.publish(5 * time.Second)
	r.lease(4 * time.Second)
	r.delay(2 * time.Second)
	r.step(time.Second)
	r.publish(3 * time.Second)
	r.lease(2 * time.Second)
	r.delay(4 * time.Second)
	if !atStart {
		r.lead(bad)
		r.c.Nodes[bad].Clock.Step(off)
	}
	r.step(2 * time.Second)
	r.awaitHandedOver(bad, why)
	r.checkRate(5 * time.Second)
	r.checkDeaths()
	r.c.AssertSameDigest(t)
}

func TestClock_LeaderAnHourAhead(t *testing.T) {
	testBadLeaderClock(t, time.Hour, true, "ahead")
}

func TestClock_LeaderAnHourBehind(t *testing.T) {
	testBadLeaderClock(t, -time.Hour, true, "behind")
}

func TestClock_LeaderSteppedForwardAnHour(t *testing.T) {
	testBadLeaderClock(t, time.Hour, false, "ahead")
}

func TestClock_LeaderSteppedBackAnHour(t *testing.T) {
	testBadLeaderClock(t, -time.Hour, false, "behind")
}

// A leader whose oscillator runs 1% fast: its clock gains 600 ms a
// minute, which its own stamps would pass on to every TTL. The limit is
// raised to 800 ms so that it leads well past the point where its own
// clock is 500 ms ahead.
func TestClock_LeaderDriftsOnePercentFast(t *testing.T) {
	r := newClockRun(t, clustertest.WithConfig(func(_ int, cfg *cluster.Config) {
		cfg.MaxClockOffset = 800 * time.Millisecond
	}))
	r.chunk = 250 * time.Millisecond
	bad := r.leader()
	r.rate[bad] = 1.01
	r.publish(60 * time.Second)
	for range 15 { // 75 s: its clock ends 750 ms ahead
		if r.truth.Equal(t0.Add(20 * time.Second)) {
			r.publish(45 * time.Second)
		}
		// A loaded machine may cost it leadership; it is to lead.
		r.lead(bad)
		r.step(5 * time.Second)
	}
	r.step(10 * time.Second) // now 850 ms ahead: past the limit
	r.awaitHandedOver(bad, "ahead")
	r.checkRate(5 * time.Second)
	r.checkDeaths()
}

// Only two of three voters answer, and the leader's clock is an hour
// behind: the two clocks read disagree, and log time, anchored earlier
// to a quorum's clocks, tells which one is wrong.
func TestClock_LeaderBehindWithOnlyTwoVoters(t *testing.T) {
	r := newClockRun(t)
	bad := r.leader()
	other := (bad + 1) % 3
	r.publish(3 * time.Second)
	r.c.Kill((bad + 2) % 3)
	r.c.Nodes[bad].Clock.Step(-time.Hour)
	// Two rounds: the second started after the kill.
	<-r.c.Nodes[bad].Node().ClockRound()
	<-r.c.Nodes[bad].Node().ClockRound()
	r.step(time.Second)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if l := r.c.WaitForLeader(clustertest.Timeout); l.NodeID() != r.c.Nodes[other].ID {
			return fmt.Errorf("%s leads", l.NodeID())
		}
		return nil
	})
	r.checkRate(3 * time.Second)
	r.checkDeaths()
}

// idle lets d pass on every clock with nothing written.
func (r *clockRun) idle(d time.Duration) {
	for i, nd := range r.c.Nodes {
		nd.Clock.Advance(time.Duration(float64(d) * r.rate[i]))
	}
	r.truth = r.truth.Add(d)
}

// The log idles for ten minutes, then the leader dies and leaves two
// voters whose clocks are an hour apart. Whichever leads next starts log
// time from what the three clocks last agreed on, not from the log's last
// stamp ten minutes back nor from the lower of the two clocks.
func TestClock_IdleLogThenTwoVotersApart(t *testing.T) {
	r := newClockRun(t)
	r.chunk = 500 * time.Millisecond
	first := r.leader()
	behind, good := (first+1)%3, (first+2)%3
	r.c.Nodes[behind].Clock.Step(-time.Hour)
	r.publish(10*time.Minute + 20*time.Second)
	r.idle(10 * time.Minute)
	for _, i := range []int{behind, good} { // both read the three clocks since
		<-r.c.Nodes[i].Node().ClockRound()
		<-r.c.Nodes[i].Node().ClockRound()
	}
	r.c.Kill(first)
	r.tick()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if l := r.c.WaitForLeader(clustertest.Timeout); l.NodeID() != r.c.Nodes[good].ID {
			return fmt.Errorf("%s leads", l.NodeID())
		}
		return nil
	})
	r.checkRate(2 * time.Second)
	r.step(20 * time.Second)
	r.checkDeaths()
}
