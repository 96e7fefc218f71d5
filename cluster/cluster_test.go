package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

func tick() *proto.Command { return &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}} }

func vhostPut(name string) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: name}}}
}

func queueDeclare(vhost, name string) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: vhost, Name: name, Durable: true}}}
}

// submitOK submits cmds on the leader until every result is a success,
// and returns their index: a new cluster's leader creates the default
// vhost just after its election, and a declaration that comes first is
// refused (NOT_FOUND), which SubmitBatch reports in the results, not as
// an error. Only for commands that may be applied twice (declarations,
// bindings).
func submitOK(t *testing.T, c *clustertest.Cluster, cmds ...*proto.Command) uint64 {
	t.Helper()
	var index uint64
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		res, err := c.WaitForLeader(clustertest.Timeout).SubmitBatch(ctxT(t, clustertest.Timeout), cmds)
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.GetCode() != 0 {
				return fmt.Errorf("%d %s", r.GetCode(), r.GetText())
			}
		}
		index = res[0].GetIndex()
		return nil
	})
	return index
}

func publish(vhost, rk string, body string) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{
		Vhost: vhost, RoutingKey: rk, Body: []byte(body), Properties: &proto.Properties{},
	}}}
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// mustSubmit submits cmds on n and checks the results' shape: one result
// per command, all carrying the same log index, applied locally already.
// Ticks alone, which change nothing but the log's clock, are sent again
// (forwarded from n when it no longer leads) when a leadership change
// left their outcome unknown: a loaded machine moves leaderships.
func mustSubmit(t testing.TB, n *cluster.Node, cmds ...*proto.Command) []*proto.Result {
	t.Helper()
	ticks := !slices.ContainsFunc(cmds, func(c *proto.Command) bool { return c.GetTick() == nil })
	deadline := time.Now().Add(10 * time.Second)
	// A consumer's registration goes again too: a second commit of it is
	// refused for its tag, which says the first one committed.
	consume := len(cmds) == 1 && cmds[0].GetConsume() != nil
	unknown := false
	res, err := n.SubmitBatch(ctxT(t, 10*time.Second), cmds)
	for (ticks || consume) && err != nil && time.Now().Before(deadline) &&
		(errors.Is(err, cluster.ErrOutcomeUnknown) || errors.Is(err, cluster.ErrNotLeader) || errors.Is(err, cluster.ErrNoLeader)) {
		unknown = unknown || errors.Is(err, cluster.ErrOutcomeUnknown)
		res, err = n.SubmitBatch(ctxT(t, time.Until(deadline)), cmds)
	}
	if err != nil {
		t.Fatalf("submit on %s: %v", n.NodeID(), err)
	}
	if consume && unknown && res[0].GetCode() == replycode.NotAllowed && strings.Contains(res[0].GetText(), "reuse consumer tag") {
		t.Logf("submit on %s: a consumer registered by a try of unknown outcome", n.NodeID())
		res[0] = &proto.Result{Index: res[0].GetIndex()}
	}
	checkResults(t, n, cmds, res)
	return res
}

func checkResults(t testing.TB, n *cluster.Node, cmds []*proto.Command, res []*proto.Result) {
	t.Helper()
	if len(res) != len(cmds) {
		t.Fatalf("%d results for %d commands", len(res), len(cmds))
	}
	idx := res[0].GetIndex()
	if idx == 0 {
		t.Fatalf("result without a log index: %v", res[0])
	}
	for _, r := range res {
		if r.GetIndex() != idx {
			t.Fatalf("one batch, two indexes: %d and %d", idx, r.GetIndex())
		}
	}
	if got := n.AppliedIndex(); got < idx {
		t.Fatalf("%s returned index %d before applying it (applied %d)", n.NodeID(), idx, got)
	}
}

func logClock(n *cluster.Node) int64 {
	var c int64
	n.View(func(m *fsm.Machine) { c = m.Clock() })
	return c
}

func TestCluster_BootstrapExpectFormsOneCluster(t *testing.T) {
	c := clustertest.New(t, 3)
	l := c.WaitForLeader(clustertest.Timeout)
	for _, n := range c.Live() {
		select {
		case <-n.Ready():
		default:
			t.Fatalf("new node %s is not ready", n.NodeID())
		}
	}
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		for _, n := range c.Live() {
			voters, leaders := 0, 0
			for _, m := range n.Members() {
				if m.Suffrage == "voter" {
					voters++
				}
				if m.Leader {
					leaders++
				}
				if m.Health != cluster.HealthAlive {
					return fmt.Errorf("%s sees %s as %q", n.NodeID(), m.ID, m.Health)
				}
				if m.RaftAddr == "" || m.GRPCAddr == "" || m.AMQPAddr == "" {
					return fmt.Errorf("%s sees %s without addresses: %+v", n.NodeID(), m.ID, m)
				}
			}
			if voters != 3 || leaders != 1 {
				return fmt.Errorf("%s sees %d voters and %d leaders", n.NodeID(), voters, leaders)
			}
		}
		return nil
	})
	term := l.Stats().Term
	for _, n := range c.Live() {
		if s := n.Stats(); s.Term != term || s.LeaderID != l.NodeID() {
			t.Fatalf("%s: term %d leader %q, want term %d leader %s", n.NodeID(), s.Term, s.LeaderID, term, l.NodeID())
		}
	}
	// The first leader proposed the defaults: something was applied
	// everywhere, at the same index.
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		for _, n := range c.Live() {
			if n.AppliedIndex() == 0 {
				return fmt.Errorf("%s applied nothing", n.NodeID())
			}
		}
		return nil
	})
	c.AssertSameDigest(t)
}

// A node that expects to be alone (BootstrapExpect 1, the default) but is
// told to join a running cluster does not bootstrap a cluster of its
// own: it waits to hear from a seed, and the cluster's leader takes it
// in. Bootstrapped alone, it would refuse its new peers until then, and
// its own first entry (index 1, term 1: the cluster's first entry's
// place) would stay in its log beside the others' first entry.
func TestCluster_ANodeToldToJoinDoesNotBootstrapAlone(t *testing.T) {
	c := clustertest.New(t, 3)
	l := c.WaitForLeader(clustertest.Timeout)
	i := c.Add(func(_ int, cfg *cluster.Config) { cfg.BootstrapExpect = 1 })
	joiner := c.Nodes[i].Node()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if vs := voters(l); !slices.Contains(vs, joiner.NodeID()) {
			return fmt.Errorf("%s is not a voter: %v", joiner.NodeID(), vs)
		}
		if got, want := joiner.AppliedIndex(), l.AppliedIndex(); got < want {
			return fmt.Errorf("%s applied %d of %d", joiner.NodeID(), got, want)
		}
		return nil
	})
	theirs, err := l.MetaLogEntry(1)
	if err != nil {
		t.Fatal(err)
	}
	first, err := joiner.MetaLogEntry(1)
	if err != nil {
		t.Fatal(err)
	}
	if first.Term != theirs.Term || first.Type != theirs.Type || !bytes.Equal(first.Data, theirs.Data) {
		var own []raft.Server
		if first.Type == raft.LogConfiguration {
			own = raft.DecodeConfiguration(first.Data).Servers
		}
		t.Fatalf("%s's first entry is its own (servers %v), not the cluster's", joiner.NodeID(), own)
	}
	c.AssertSameDigest(t)
}

func TestCluster_SubmitOnAnyNode(t *testing.T) {
	c := clustertest.New(t, 3)
	c.WaitForLeader(clustertest.Timeout)
	var last uint64
	for round := range 3 {
		for _, n := range c.Live() {
			before := logClock(n)
			cmds := []*proto.Command{
				tick(),
				vhostPut(fmt.Sprintf("v%d", round)),
				queueDeclare("/", fmt.Sprintf("q-%s-%d", n.NodeID(), round)),
				publish("/", "q", "hello"),
			}
			res := mustSubmit(t, n, cmds...)
			if idx := res[0].GetIndex(); idx <= last {
				t.Fatalf("index went from %d to %d", last, idx)
			} else {
				last = idx
			}
			if after := logClock(n); after < before {
				t.Fatalf("%s: log clock went back from %d to %d", n.NodeID(), before, after)
			}
		}
	}
	// Concurrent single submissions from every node.
	errs := make(chan error, 60)
	for i := range 60 {
		n := c.Live()[i%3]
		go func() {
			res, err := n.Submit(ctxT(t, 10*time.Second), tick())
			if err == nil && n.AppliedIndex() < res.GetIndex() {
				err = fmt.Errorf("returned before applying %d", res.GetIndex())
			}
			errs <- err
		}()
	}
	for range 60 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	c.AssertSameDigest(t)
}

func TestCluster_ForwardsLargeMessages(t *testing.T) {
	// Large entries are slow to write under the race detector: relax raft.
	c := clustertest.New(t, 3, clustertest.WithConfig(func(_ int, cfg *cluster.Config) {
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 2*time.Second, 2*time.Second, time.Second
		cfg.NodeDownAfter = cluster.LeastDownAfter(cfg.HeartbeatTimeout)
	}))
	c.WaitForLeader(clustertest.Timeout)
	big := string(make([]byte, 4<<20+1024)) // above gRPC's 4 MiB default
	f := c.Followers()[0]
	res := mustSubmit(t, f, publish("/", "q", big), tick())
	var size int
	_ = f.LogEntries(func(i uint64, env *proto.Envelope) bool {
		if i == res[0].GetIndex() {
			size = len(env.GetCommands()[0].GetPublish().GetBody())
		}
		return true
	})
	if size != len(big) {
		t.Fatalf("entry %d carries a body of %d bytes, want %d", res[0].GetIndex(), size, len(big))
	}
}
