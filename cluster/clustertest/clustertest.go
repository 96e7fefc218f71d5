// Package clustertest runs in-process raftmq clusters for tests: real
// nodes (raft over TCP, memberlist, gRPC forwarding) on loopback, with
// kill, restart, partition and a fake clock.
package clustertest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/fsm"
	"google.golang.org/grpc"
)

// Timeout is how long helpers wait for a condition before failing.
const Timeout = 20 * time.Second

// Option changes how New builds the cluster.
type Option func(*options)

type options struct {
	fakeClock *time.Time
	expect    int
	tweak     []func(i int, c *cluster.Config)
}

// WithFakeClock gives every node its own FakeClock, all starting at start.
func WithFakeClock(start time.Time) Option {
	return func(o *options) { o.fakeClock = &start }
}

// WithBootstrapExpect sets BootstrapExpect (default: the cluster size).
func WithBootstrapExpect(k int) Option {
	return func(o *options) { o.expect = k }
}

// WithConfig adjusts node i's configuration before it starts.
func WithConfig(fn func(i int, c *cluster.Config)) Option {
	return func(o *options) { o.tweak = append(o.tweak, fn) }
}

// WithSnapshotThreshold makes nodes snapshot after k entries, keep few
// trailing logs, and check often.
func WithSnapshotThreshold(k uint64) Option {
	return WithConfig(func(_ int, c *cluster.Config) {
		c.SnapshotThreshold = k
		c.TrailingLogs = k / 2
		c.SnapshotInterval = 100 * time.Millisecond
	})
}

// Node is one member of a test cluster.
type Node struct {
	ID     string
	Config cluster.Config
	Clock  *FakeClock // nil without WithFakeClock
	Links  *cluster.Links

	mu      sync.Mutex
	node    *cluster.Node
	grpcSrv *grpc.Server
	addrs   []string // raft, gRPC and gossip addresses
}

// Node returns the running cluster.Node, or nil while killed.
func (n *Node) Node() *cluster.Node {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.node
}

// Cluster is a set of in-process nodes.
type Cluster struct {
	t      testing.TB
	logger *slog.Logger
	Nodes  []*Node
}

// newNode is the configuration of a test node on loopback.
func (c *Cluster) newNode(id string, i, expect int) *Node {
	nd := &Node{ID: id, Links: cluster.NewLinks()}
	// Raft and gossip listen on port 0 at first; the ports they get are
	// kept for restarts. Picking free ports in advance races with other
	// tests running at the same time.
	nd.Config = cluster.Config{
		NodeID:  id,
		DataDir: c.t.TempDir(),
		Logger:  c.logger.With("test_node", id),
		GroupConfig: cluster.GroupConfig{
			RaftAddr:           "127.0.0.1:0",
			HeartbeatTimeout:   timingScale * 300 * time.Millisecond,
			ElectionTimeout:    timingScale * 300 * time.Millisecond,
			LeaderLeaseTimeout: timingScale * 150 * time.Millisecond,
			CommitTimeout:      2 * time.Millisecond,
			LeaderWait:         5 * time.Second,
		},
		MembershipConfig: cluster.MembershipConfig{
			AMQPAddr:          "127.0.0.1:" + strconv.Itoa(5672+i),
			GossipAddr:        "127.0.0.1:0",
			BootstrapExpect:   expect,
			Links:             nd.Links,
			NodeDownAfter:     timingScale * time.Second,
			ReconcileInterval: 200 * time.Millisecond,
			JoinRetryInterval: 100 * time.Millisecond,
			Gossip:            tightGossip,
		},
		TimeConfig: cluster.TimeConfig{
			ClockSampleInterval: 100 * time.Millisecond,
		},
	}
	return nd
}

// StartOutsider starts a node that joins the cluster's gossip addresses but
// is not one of c.Nodes (helpers such as WaitForLeader ignore it): a node
// that should, or should not, get in. tweak adjusts its configuration
// (after the defaults, which copy node 0's gossip keys but no TLS: a
// certificate must name the node). It is stopped at the end of the test.
func (c *Cluster) StartOutsider(id string, tweak func(*cluster.Config)) *Node {
	c.t.Helper()
	// It expects more nodes than it can ever see alone, so it never
	// bootstraps a cluster of its own: it can only be added.
	nd := c.newNode(id, len(c.Nodes), len(c.Nodes)+1)
	nd.Config.GossipKeys = c.Nodes[0].Config.GossipKeys
	for _, other := range c.Nodes {
		nd.Config.Join = append(nd.Config.Join, other.Config.GossipAddr)
	}
	if tweak != nil {
		tweak(&nd.Config)
	}
	c.startNode(nd)
	c.t.Cleanup(func() { stopNode(nd) })
	return nd
}

// Add starts a node that joins the running cluster as one of c.Nodes
// (the leader adds it as a voter once gossip sees it alive), and returns
// its index. tweak, if not nil, adjusts its configuration. It never
// bootstraps a cluster of its own.
func (c *Cluster) Add(tweak func(i int, c *cluster.Config)) int {
	c.t.Helper()
	i := len(c.Nodes)
	nd := c.newNode(fmt.Sprintf("node%d", i), i, i+1)
	nd.Config.GossipKeys = c.Nodes[0].Config.GossipKeys
	for _, other := range c.Nodes {
		nd.Config.Join = append(nd.Config.Join, other.Config.GossipAddr)
	}
	if tweak != nil {
		tweak(i, &nd.Config)
	}
	c.Nodes = append(c.Nodes, nd)
	c.startNode(nd)
	return i
}

// New starts n nodes on loopback that bootstrap together and registers
// their shutdown with t.Cleanup.
func New(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	o := &options{expect: n}
	for _, f := range opts {
		f(o)
	}
	c := &Cluster{t: t, logger: testLogger()}
	for i := range n {
		nd := c.newNode(fmt.Sprintf("node%d", i), i, o.expect)
		if o.fakeClock != nil {
			nd.Clock = NewFakeClock(*o.fakeClock)
			nd.Config.Clock = nd.Clock
		}
		c.Nodes = append(c.Nodes, nd)
	}
	for i, nd := range c.Nodes {
		for _, f := range o.tweak {
			f(i, &nd.Config)
		}
	}
	t.Cleanup(c.Close)
	for i := range c.Nodes {
		// Each node joins the ones started before it; gossip does the rest.
		for j := range i {
			c.Nodes[i].Config.Join = append(c.Nodes[i].Config.Join, c.Nodes[j].Config.GossipAddr)
		}
		c.startNode(c.Nodes[i])
	}
	// From now on every node knows every address (for restarts).
	for i, nd := range c.Nodes {
		nd.Config.Join = nil
		for j, other := range c.Nodes {
			if j != i {
				nd.Config.Join = append(nd.Config.Join, other.Config.GossipAddr)
			}
		}
	}
	return c
}

func testLogger() *slog.Logger {
	if os.Getenv("RAFTMQ_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError + 1}))
}

func tightGossip(c *memberlist.Config) {
	c.ProbeInterval = timingScale * 200 * time.Millisecond
	c.ProbeTimeout = timingScale * 100 * time.Millisecond
	c.SuspicionMult = 2
	c.GossipInterval = 20 * time.Millisecond
	c.PushPullInterval = time.Second
	c.TCPTimeout = time.Second
	c.GossipToTheDeadTime = 5 * time.Second
	c.DeadNodeReclaimTime = time.Millisecond
}

// start starts node i with its configuration (after a kill: same data dir
// and addresses).
func (c *Cluster) start(i int) {
	c.t.Helper()
	c.startNode(c.Nodes[i])
}

func (c *Cluster) startNode(nd *Node) {
	c.t.Helper()
	var lis net.Listener
	var err error
	deadline := time.Now().Add(5 * time.Second)
	if nd.Config.GRPCAddr == "" {
		nd.Config.GRPCAddr = "127.0.0.1:0"
	}
	for {
		lis, err = net.Listen("tcp", nd.Config.GRPCAddr)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // the port is held until the old listener is gone
	}
	if err != nil {
		c.t.Fatalf("%s: grpc listen: %v", nd.ID, err)
	}
	nd.Config.GRPCAddr = lis.Addr().String()
	var srv *grpc.Server
	var node *cluster.Node
	for {
		srv = grpc.NewServer(cluster.ServerOptions(nd.Config.TLS)...)
		cfg := nd.Config
		cfg.GRPCServer = srv
		node, err = cluster.Start(context.Background(), cfg)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // ports of the previous run are being released
	}
	if err != nil {
		lis.Close()
		c.t.Fatalf("%s: start: %v", nd.ID, err)
	}
	go func() { _ = srv.Serve(lis) }()
	nd.Config.RaftAddr = node.RaftAddr()
	nd.Config.GossipAddr = node.GossipAddr()
	nd.mu.Lock()
	nd.node, nd.grpcSrv = node, srv
	nd.addrs = []string{nd.Config.RaftAddr, nd.Config.GRPCAddr, nd.Config.GossipAddr}
	nd.mu.Unlock()
}

// Kill stops node i abruptly: no leave, no goodbye.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	stopNode(c.Nodes[i])
}

// Stop stops node i as the raftmq command does when asked to stop,
// after its hand-over (cluster.Node.HandOver, which a test calls
// itself): the node closes first, answering what it was forwarded,
// then its gRPC server stops.
func (c *Cluster) Stop(i int) {
	c.t.Helper()
	stop(c.Nodes[i], true)
}

func stopNode(nd *Node) { stop(nd, false) }

func stop(nd *Node, nodeFirst bool) {
	nd.mu.Lock()
	node, srv := nd.node, nd.grpcSrv
	nd.node, nd.grpcSrv = nil, nil
	nd.mu.Unlock()
	if node == nil {
		return
	}
	if nodeFirst {
		_ = node.Close()
		srv.Stop()
		return
	}
	srv.Stop()
	_ = node.Close()
}

// Restart starts a killed node i again, with the same data dir and
// addresses.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	if c.Nodes[i].Node() != nil {
		c.Kill(i)
	}
	c.start(i)
}

// Close stops every node.
func (c *Cluster) Close() {
	for i := range c.Nodes {
		c.Kill(i)
	}
}

// Live returns the running nodes.
func (c *Cluster) Live() []*cluster.Node {
	var out []*cluster.Node
	for _, nd := range c.Nodes {
		if n := nd.Node(); n != nil {
			out = append(out, n)
		}
	}
	return out
}

// Index returns the position of the node with this id, or -1.
func (c *Cluster) Index(id string) int {
	for i, nd := range c.Nodes {
		if nd.ID == id {
			return i
		}
	}
	return -1
}

// Leader returns the ready leader with the highest term, or nil.
func (c *Cluster) Leader() *cluster.Node {
	var best *cluster.Node
	var term uint64
	for _, n := range c.Live() {
		if !n.IsLeader() {
			continue
		}
		if s := n.Stats(); best == nil || s.Term > term {
			best, term = n, s.Term
		}
	}
	return best
}

// Followers returns the running nodes that are not the leader.
func (c *Cluster) Followers() []*cluster.Node {
	l := c.Leader()
	var out []*cluster.Node
	for _, n := range c.Live() {
		if n != l {
			out = append(out, n)
		}
	}
	return out
}

// WaitForLeader waits until exactly one running node is a ready leader and
// every running node agrees on it, and returns it.
func (c *Cluster) WaitForLeader(timeout time.Duration) *cluster.Node {
	c.t.Helper()
	var l *cluster.Node
	Eventually(c.t, timeout, func() error {
		l = nil
		for _, n := range c.Live() {
			if n.IsLeader() {
				if l != nil {
					return fmt.Errorf("two leaders: %s and %s", l.NodeID(), n.NodeID())
				}
				l = n
			}
		}
		if l == nil {
			return fmt.Errorf("no leader")
		}
		for _, n := range c.Live() {
			if id, _ := n.Leader(); id != l.NodeID() {
				return fmt.Errorf("%s sees leader %q, want %s", n.NodeID(), id, l.NodeID())
			}
		}
		return nil
	})
	return l
}

// Partition cuts the named nodes off from the others (both directions; raft,
// gRPC and gossip).
func (c *Cluster) Partition(ids ...string) {
	in := map[string]bool{}
	for _, id := range ids {
		in[id] = true
	}
	for _, a := range c.Nodes {
		var block []string
		for _, b := range c.Nodes {
			if in[a.ID] != in[b.ID] {
				b.mu.Lock()
				block = append(block, b.addrs...)
				b.mu.Unlock()
			}
		}
		a.Links.Block(block...)
	}
}

// Freeze stops the named nodes as SIGSTOP would, as far as the others can
// tell: every link between them and the rest stays open but carries
// nothing (raft, gRPC and gossip) until Heal. The frozen nodes keep
// running inside, so a frozen leader still believes it leads.
func (c *Cluster) Freeze(ids ...string) { c.freeze(3, ids) }

// FreezeButGossip freezes the named nodes' raft and gRPC links as Freeze
// does, and leaves their gossip running: gossip finds them alive while
// nothing they were asked by raft or gRPC is answered. It isolates what
// a node learns from gossip alone from what finding a node dead tells.
func (c *Cluster) FreezeButGossip(ids ...string) { c.freeze(2, ids) }

// FreezeRaft freezes the named nodes' raft links alone: gRPC and gossip
// run, so the others reach them and find them alive, while their raft
// hears from no one (a node cut off from its groups' consensus only).
func (c *Cluster) FreezeRaft(ids ...string) { c.freeze(1, ids) }

// freeze freezes the first k of each link's addresses (raft, gRPC,
// gossip) between the named nodes and the rest.
func (c *Cluster) freeze(k int, ids []string) {
	in := map[string]bool{}
	for _, id := range ids {
		in[id] = true
	}
	for _, a := range c.Nodes {
		var freeze []string
		for _, b := range c.Nodes {
			if in[a.ID] != in[b.ID] {
				b.mu.Lock()
				freeze = append(freeze, b.addrs[:k]...)
				b.mu.Unlock()
			}
		}
		a.Links.Freeze(freeze...)
	}
}

// Heal restores every link.
func (c *Cluster) Heal() {
	for _, nd := range c.Nodes {
		nd.Links.Heal()
	}
}

// WaitApplied waits until every running node's state machine has applied
// index.
func (c *Cluster) WaitApplied(index uint64) {
	c.t.Helper()
	Eventually(c.t, Timeout, func() error {
		for _, n := range c.Live() {
			if got := n.AppliedIndex(); got < index {
				return fmt.Errorf("%s applied %d, want %d", n.NodeID(), got, index)
			}
		}
		return nil
	})
}

// AssertSameDigest waits until every running node has applied the same
// index, then checks that their state digests are equal.
func (c *Cluster) AssertSameDigest(t testing.TB) {
	t.Helper()
	var lastErr error
	deadline := time.Now().Add(Timeout)
	for {
		lastErr = c.sameDigest()
		if lastErr == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas differ: %v", lastErr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (c *Cluster) sameDigest() error {
	type view struct {
		index  uint64
		digest [32]byte
	}
	var first *view
	var firstID string
	for _, n := range c.Live() {
		var v view
		n.View(func(m *fsm.Machine) { v = view{m.AppliedIndex(), m.Digest()} })
		if first == nil {
			first, firstID = &v, n.NodeID()
			continue
		}
		if v.index != first.index {
			return fmt.Errorf("%s applied %d, %s applied %d", firstID, first.index, n.NodeID(), v.index)
		}
		if v.digest != first.digest {
			return fmt.Errorf("%s and %s both at %d have digests %x and %x", firstID, n.NodeID(), v.index, first.digest[:8], v.digest[:8])
		}
	}
	return nil
}

// AdvanceClock moves every node's fake clock forward by d.
func (c *Cluster) AdvanceClock(d time.Duration) {
	for _, nd := range c.Nodes {
		if nd.Clock == nil {
			c.t.Fatal("AdvanceClock needs WithFakeClock")
		}
		nd.Clock.Advance(d)
	}
}

// Eventually polls fn until it returns nil, failing the test with fn's last
// error after timeout.
func Eventually(t testing.TB, timeout time.Duration, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after %v: %v", timeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
