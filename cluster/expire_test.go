package cluster_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// The tests in this file need the real state machine (queues, messages,
// deadlines, consumers); while fsm answers 540 NOT_IMPLEMENTED they skip.

func int32Arg(key string, v int32) *proto.Field {
	return &proto.Field{Key: key, Value: &proto.Value{Kind: &proto.Value_Int32{Int32: v}}}
}

func declareWithArgs(name string, args ...*proto.Field) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{
		Vhost: "/", Name: name, Durable: true, Arguments: &proto.Table{Fields: args},
	}}}
}

func publishTo(queue, body string) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{
		Vhost: "/", Exchange: "", RoutingKey: queue, Body: []byte(body), Properties: &proto.Properties{},
	}}}
}

// requireFSM skips the test while the state machine is a stub, and fails it
// on any other error code.
func requireFSM(t *testing.T, res []*proto.Result) {
	t.Helper()
	for _, r := range res {
		if r.GetCode() == 540 {
			t.Skip("fsm answers 540 NOT_IMPLEMENTED: this test needs the real state machine")
		}
		if r.GetCode() != 0 {
			t.Fatalf("command refused: %d %s", r.GetCode(), r.GetText())
		}
	}
}

// waitDefaults waits until every node applied the defaults entry (so "/"
// exists).
func waitDefaults(t *testing.T, c *clustertest.Cluster, l *cluster.Node) {
	t.Helper()
	var idx uint64
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		_ = l.LogEntries(func(i uint64, env *proto.Envelope) bool {
			for _, cmd := range env.GetCommands() {
				if cmd.GetUserPut() != nil {
					idx = i
					return false
				}
			}
			return true
		})
		if idx == 0 {
			return fmt.Errorf("defaults not proposed yet")
		}
		return nil
	})
	c.WaitApplied(idx)
}

type stampedCmd struct {
	index uint64
	stamp int64
	cmd   *proto.Command
}

// findCommands lists the commands of n's log that match.
func findCommands(t *testing.T, n *cluster.Node, match func(*proto.Command) bool) []stampedCmd {
	t.Helper()
	var out []stampedCmd
	if err := n.LogEntries(func(i uint64, env *proto.Envelope) bool {
		for _, cmd := range env.GetCommands() {
			if match(cmd) {
				out = append(out, stampedCmd{i, env.GetStampMs(), cmd})
			}
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func entryStamp(t *testing.T, n *cluster.Node, index uint64) int64 {
	t.Helper()
	// The entry committed, but n may not hold it yet: a leader that
	// changed under the submit left n a follower catching up.
	ctx, cancel := context.WithTimeout(context.Background(), clustertest.Timeout)
	defer cancel()
	if err := n.WaitApplied(ctx, index); err != nil {
		t.Fatalf("%s did not apply entry %d: %v", n.NodeID(), index, err)
	}
	var st int64 = -1
	err := n.LogEntries(func(i uint64, env *proto.Envelope) bool {
		if i == index {
			st = env.GetStampMs()
			return false
		}
		return true
	})
	if st < 0 {
		t.Fatalf("%s has no entry %d (%v)", n.NodeID(), index, err)
	}
	return st
}

func isExpireOf(queue string) func(*proto.Command) bool {
	return func(c *proto.Command) bool {
		for _, q := range c.GetExpire().GetQueues() {
			if q.GetName() == queue {
				return true
			}
		}
		return false
	}
}

func noDeadlines(c *clustertest.Cluster) error {
	for _, n := range c.Live() {
		var ok bool
		var at int64
		n.View(func(m *fsm.Machine) { at, ok = m.NextDeadline() })
		if ok {
			return fmt.Errorf("%s still has a deadline at %d", n.NodeID(), at)
		}
	}
	return nil
}

func TestCluster_ExpirySchedulerProposesAtTheDeadline(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithFakeClock(t0))
	l := c.WaitForLeader(clustertest.Timeout)
	waitDefaults(t, c, l)
	requireFSM(t, mustSubmit(t, l, declareWithArgs("ttl-q", int32Arg("x-message-ttl", 2000))))
	pub := mustSubmit(t, c.Followers()[0], publishTo("ttl-q", "a"), publishTo("ttl-q", "b"))
	requireFSM(t, pub)
	deadline := entryStamp(t, l, pub[0].GetIndex()) + 2000
	var at int64
	var ok bool
	l.View(func(m *fsm.Machine) { at, ok = m.NextDeadline() })
	if !ok || at != deadline {
		t.Fatalf("next deadline %d (%v), want %d", at, ok, deadline)
	}

	c.AdvanceClock(1999 * time.Millisecond)
	barrier := mustSubmit(t, l, tick())
	c.WaitApplied(barrier[0].GetIndex())
	if got := findCommands(t, l, isExpireOf("ttl-q")); len(got) != 0 {
		t.Fatalf("expired before the deadline: %v", got)
	}
	c.AdvanceClock(time.Millisecond)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		got := findCommands(t, l, isExpireOf("ttl-q"))
		if len(got) == 0 {
			return fmt.Errorf("no Expire in the log")
		}
		if got[0].stamp != deadline {
			t.Fatalf("Expire stamped %d, deadline %d", got[0].stamp, deadline)
		}
		return noDeadlines(c)
	})
	c.AssertSameDigest(t)
}

// The deaths' scheduler too: time that passes as it arms its timer for a
// message's deadline does not hold the death until time passes again,
// nor bring it before the deadline.
func TestCluster_ExpiryWhenTimePassesAsItsTimerIsArmed(t *testing.T) {
	c, armed := jumpAsArmed(t)
	l := c.WaitForLeader(clustertest.Timeout)
	waitDefaults(t, c, l)
	requireFSM(t, mustSubmit(t, l, declareWithArgs("ttl-q", int32Arg("x-message-ttl", 2000))))
	armed.Store(true)
	pub := mustSubmit(t, c.Followers()[0], publishTo("ttl-q", "a"))
	requireFSM(t, pub)
	deadline := entryStamp(t, l, pub[0].GetIndex()) + 2000
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if armed.Load() {
			return fmt.Errorf("no timer armed for the death")
		}
		got := findCommands(t, l, isExpireOf("ttl-q"))
		if len(got) == 0 {
			return fmt.Errorf("no Expire in the log")
		}
		if got[0].stamp < deadline {
			t.Fatalf("Expire stamped %d, before the deadline %d", got[0].stamp, deadline)
		}
		return noDeadlines(c)
	})
	c.AssertSameDigest(t)
}

func TestCluster_ExpiryAcrossFailover(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithFakeClock(t0))
	l := c.WaitForLeader(clustertest.Timeout)
	waitDefaults(t, c, l)
	requireFSM(t, mustSubmit(t, l, declareWithArgs("ttl-f", int32Arg("x-message-ttl", 2000))))
	var last []*proto.Result
	for i := range 10 {
		last = mustSubmit(t, l, publishTo("ttl-f", fmt.Sprint(i)))
		requireFSM(t, last)
	}
	c.WaitApplied(last[0].GetIndex())
	deadline := entryStamp(t, l, last[0].GetIndex()) + 2000

	// Kill the leader halfway to the deadline; the clock keeps running.
	c.AdvanceClock(time.Second)
	c.Kill(c.Index(l.NodeID()))
	nl := c.WaitForLeader(clustertest.Timeout)
	c.AdvanceClock(time.Second)

	clustertest.Eventually(t, clustertest.Timeout, func() error {
		got := findCommands(t, nl, isExpireOf("ttl-f"))
		if len(got) == 0 {
			return fmt.Errorf("no Expire in the log")
		}
		e := got[len(got)-1]
		// The fake clock stands still during the election, so the new leader
		// stamps the deadline itself; a real one adds at most the election.
		if e.stamp < deadline || e.stamp > deadline+int64(time.Second/time.Millisecond) {
			t.Fatalf("Expire stamped %d, deadline %d", e.stamp, deadline)
		}
		return noDeadlines(c)
	})
	c.AssertSameDigest(t)
}

func TestCluster_QueueLeaseScheduler(t *testing.T) {
	logs := &lockedLog{}
	c := clustertest.New(t, 3, clustertest.WithFakeClock(t0), clustertest.WithConfig(func(_ int, cfg *cluster.Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}))
	l := c.WaitForLeader(clustertest.Timeout)
	waitDefaults(t, c, l)
	requireFSM(t, mustSubmit(t, l, declareWithArgs("lease-q", int32Arg("x-expires", 5000))))
	isLease := func(cmd *proto.Command) bool { return cmd.GetExpireQueue().GetQueue().GetName() == "lease-q" }
	c.AdvanceClock(4 * time.Second)
	barrier := mustSubmit(t, l, tick())
	c.WaitApplied(barrier[0].GetIndex())
	if got := findCommands(t, l, isLease); len(got) != 0 {
		t.Fatalf("lease expired early: %v", got)
	}
	c.AdvanceClock(time.Second)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if len(findCommands(t, l, isLease)) == 0 {
			return fmt.Errorf("no ExpireQueue in the log")
		}
		var ok bool
		l.View(func(m *fsm.Machine) { _, ok = m.NextLeaseDue() })
		if ok {
			return fmt.Errorf("a lease is still pending")
		}
		return nil
	})
	c.AssertSameDigest(t)
	// The node that deleted it says so: a deletion nobody asked for.
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if !logs.has(`msg="queue deleted: its x-expires lease ran out"`, "queue=lease-q") {
			return fmt.Errorf("no node logged the lease running out")
		}
		return nil
	})
}

// lockedLog collects the lines the nodes log, for a test to look for one.
type lockedLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, string(p))
	return len(p), nil
}

// has reports whether a line holds every one of parts.
func (l *lockedLog) has(parts ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.lines, func(line string) bool {
		for _, p := range parts {
			if !strings.Contains(line, p) {
				return false
			}
		}
		return true
	})
}

// recorder is an fsm.Sink that records the deliveries it is given.
type recorder struct {
	mu        sync.Mutex
	delivered []*fsm.Delivery
	cancelled []*proto.ConsumerRef
	down      []string
	timedOut  []*proto.ChannelRef
	// consumersTimedOut are the ConsumerTimedOut effects' consumers.
	consumersTimedOut []*proto.ConsumerRef
}

func (r *recorder) ConsumerTimedOut(c *proto.ConsumerRef, _ int64, _ []uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.consumersTimedOut = append(r.consumersTimedOut, c)
}

func (r *recorder) Deliver(d *fsm.Delivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.delivered = append(r.delivered, d)
}

func (r *recorder) ConsumerCancelled(c *proto.ConsumerRef) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cancelled = append(r.cancelled, c)
}

func (r *recorder) ChannelTimedOut(ch *proto.ChannelRef, _ int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timedOut = append(r.timedOut, ch)
}

func (r *recorder) NodeDown(node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down = append(r.down, node)
}

func (r *recorder) downs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.down)
}

func (r *recorder) deliveries() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.delivered)
}

func TestCluster_EffectsReachOnlyTheConsumersNodeBeforeSubmitReturns(t *testing.T) {
	sinks := []*recorder{{}, {}, {}}
	c := clustertest.New(t, 3, clustertest.WithConfig(func(i int, cfg *cluster.Config) {
		cfg.Effects = sinks[i]
	}))
	l := c.WaitForLeader(clustertest.Timeout)
	waitDefaults(t, c, l)
	f := c.Followers()[0]
	fi := c.Index(f.NodeID())
	requireFSM(t, mustSubmit(t, l, declareWithArgs("fx")))
	consumer := &proto.ConsumerRef{Channel: &proto.ChannelRef{Node: f.NodeID(), Connection: "conn-1", Channel: 1}, Tag: "ctag"}
	requireFSM(t, mustSubmit(t, f, &proto.Command{Cmd: &proto.Command_Consume{Consume: &proto.Consume{
		Vhost: "/", Queue: "fx", Consumer: consumer, NoAck: true,
	}}}))
	// Published through another node: once the consumer's node returns from
	// its own Submit of a later command, the delivery has been made there.
	requireFSM(t, mustSubmit(t, l, publishTo("fx", "hello")))
	mustSubmit(t, f, tick())
	if got := sinks[fi].deliveries(); got != 1 {
		t.Fatalf("consumer's node got %d deliveries, want 1", got)
	}
	sinks[fi].mu.Lock()
	d := sinks[fi].delivered[0]
	sinks[fi].mu.Unlock()
	if d.Consumer.GetTag() != "ctag" || string(d.Body) != "hello" {
		t.Fatalf("delivery %+v", d)
	}
	for i, s := range sinks {
		if i != fi && s.deliveries() != 0 {
			t.Fatalf("node%d performed a delivery for a consumer on %s", i, f.NodeID())
		}
	}
	// A publish submitted on the consumer's node itself is delivered before
	// its Submit returns.
	requireFSM(t, mustSubmit(t, f, publishTo("fx", "again")))
	if got := sinks[fi].deliveries(); got != 2 {
		t.Fatalf("consumer's node got %d deliveries after its own publish, want 2", got)
	}
	c.AssertSameDigest(t)
}

// A whole-cluster restart restarts x-expires leases (the time the cluster
// was down does not count); a failover does not.
func TestCluster_LeasesRestartAfterWholeClusterRestart(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithFakeClock(t0))
	l := c.WaitForLeader(clustertest.Timeout)
	waitDefaults(t, c, l)
	requireFSM(t, mustSubmit(t, l, declareWithArgs("lease-q", int32Arg("x-expires", 5000))))
	isRestart := func(cmd *proto.Command) bool { return cmd.GetRestartLeases() != nil }

	// Failover: the new leader keeps the leases as they are.
	c.Kill(c.Index(string(l.NodeID())))
	l = c.WaitForLeader(clustertest.Timeout)
	c.WaitApplied(mustSubmit(t, l, tick())[0].GetIndex())
	if got := findCommands(t, l, isRestart); len(got) != 0 {
		t.Fatalf("a failover restarted the leases: %v", got)
	}

	// The whole cluster down for a minute, far past the lease.
	for i := range c.Nodes {
		c.Kill(i)
	}
	c.AdvanceClock(time.Minute)
	for i := range c.Nodes {
		c.Restart(i)
	}
	l = c.WaitForLeader(clustertest.Timeout)
	var restartedAt int64
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		got := findCommands(t, l, isRestart)
		if len(got) != 1 {
			return fmt.Errorf("%d RestartLeases in the log, want 1", len(got))
		}
		restartedAt = got[0].stamp
		c.WaitApplied(got[0].index)
		return nil
	})
	var due int64
	var ok, exists bool
	l.View(func(m *fsm.Machine) {
		due, ok = m.NextLeaseDue()
		_, exists = m.Queue("/", "lease-q")
	})
	if !exists || !ok || due != restartedAt+5000 {
		t.Fatalf("after the restart: queue exists %v, lease due %d (ok %v), want %d", exists, due, ok, restartedAt+5000)
	}
	c.AssertSameDigest(t)
}
