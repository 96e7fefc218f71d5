package cluster_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft-wal/segment"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// hashSink records the sha256 of each body delivered to one node: the
// bodies here are tens of MiB.
type hashSink struct {
	mu   sync.Mutex
	seen map[[32]byte]int
}

func (d *hashSink) Deliver(x *fsm.Delivery) {
	h := sha256.Sum256(x.Body)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.seen == nil {
		d.seen = map[[32]byte]int{}
	}
	d.seen[h]++
}
func (d *hashSink) ConsumerCancelled(*proto.ConsumerRef)                 {}
func (d *hashSink) NodeDown(string)                                      {}
func (d *hashSink) ChannelTimedOut(*proto.ChannelRef, int64)             {}
func (d *hashSink) ConsumerTimedOut(*proto.ConsumerRef, int64, []uint64) {}

func (d *hashSink) missing(want [][32]byte) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, w := range want {
		if d.seen[w] == 0 {
			n++
		}
	}
	return n
}

// largeBody is n bytes, distinct per seed.
func largeBody(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed ^ byte(i) ^ byte(i>>11)
	}
	return b
}

// Messages at the largest size the node takes, above the 64 MiB that
// raft-wal reads back, are confirmed, one byte more is refused, and every
// confirmed body comes back byte for byte on every node after all of
// them restarted, including a follower that was down and caught up from
// the leader's snapshot with the bodies it names.
func TestCluster_MaxSizeMessagesSurviveRestartsAndInstall(t *testing.T) {
	for _, store := range []string{cluster.LogStoreWAL, cluster.LogStoreBolt} {
		t.Run(store, func(t *testing.T) { testMaxSizeMessages(t, store) })
	}
}

func testMaxSizeMessages(t *testing.T, store string) {
	max := segment.MaxEntrySize + 8<<20
	if clustertest.RaceDetector {
		// Under the race detector three nodes of one process moving
		// 72 MiB entries starve raft's heartbeats for seconds: the same
		// path (entries kept beside the log, the snapshot's bodies) is
		// taken here just above largelog's threshold, and e2e's
		// TestLargeMessages takes real processes past 64 MiB.
		max = 6 << 20
	}
	sinks := []*hashSink{{}, {}, {}}
	c := clustertest.New(t, 3, clustertest.WithSnapshotThreshold(32),
		clustertest.WithConfig(func(i int, c *cluster.Config) {
			c.LogStore = store
			c.MaxMessageSize = max
			c.Effects = sinks[i]
			// Production timings (raftmq's --raft-timeout): moving tens of
			// MiB between three nodes of one process on a busy machine
			// can starve the tests' 150 ms lease.
			c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
		}))
	l := c.WaitForLeader(clustertest.Timeout)
	cmds := []*proto.Command{{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{Vhost: "/", Name: "x", Type: "fanout", Durable: true}}}}
	for i := range c.Nodes {
		q := fmt.Sprintf("q%d", i)
		cmds = append(cmds, queueDeclare("/", q), &proto.Command{Cmd: &proto.Command_Bind{Bind: &proto.Bind{Vhost: "/", Source: "x", Destination: q}}})
	}
	submitOK(t, c, cmds...)
	victim := c.Followers()[0]
	vi := c.Index(victim.NodeID())
	c.Kill(vi)

	pub := func(body []byte) *proto.Command {
		return &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", Exchange: "x", Body: body, Properties: &proto.Properties{}}}}
	}
	var want [][32]byte
	var lastPublish uint64
	// The largest through the forwarding stream, one byte under on the
	// leader.
	for k, p := range []struct {
		follower bool
		size     int
	}{{true, max}, {false, max - 1}} {
		body := largeBody(p.size, byte(k+1))
		want = append(want, sha256.Sum256(body))
		lastPublish = publishConfirmed(t, c, p.follower, pub(body))
	}
	l = c.WaitForLeader(clustertest.Timeout)
	res, err := l.SubmitBatch(ctxT(t, clustertest.Timeout), []*proto.Command{pub(largeBody(max+1, 9))})
	wantText := fmt.Sprintf("message size %d is larger than configured max size %d", max+1, max)
	if err != nil || res[0].GetCode() != 406 || !strings.Contains(res[0].GetText(), wantText) {
		t.Fatalf("publish of max+1 bytes: %+v, %v; want 406 %q", res, err, wantText)
	}

	for range 100 { // the publishes fall behind the trailing logs
		tickOn(t, c)
	}
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if s := c.WaitForLeader(clustertest.Timeout).Stats(); s.LastSnapshotIndex < lastPublish+50 {
			return fmt.Errorf("leader snapshot at %d", s.LastSnapshotIndex)
		}
		return nil
	})
	c.Restart(vi)
	c.WaitApplied(tickOn(t, c))
	if store == cluster.LogStoreBolt {
		// The write-ahead log keeps a log that is mostly live bodies
		// (holdDenseLog), so its follower may catch up from the log; a
		// bolt log is compacted, and the bodies come with the snapshot.
		awaitInstalledSnapshot(t, c.Nodes[vi].Node())
		if n := dirSize(t, filepath.Join(c.Nodes[vi].Config.DataDir, "bodies")); n < 2*int64(max) {
			t.Fatalf("the node that installed the snapshot holds %d bytes of body files, want both bodies", n)
		}
	}

	// Every node restarts.
	for i := range c.Nodes {
		c.Kill(i)
	}
	for i := range c.Nodes {
		c.Restart(i)
	}
	c.WaitApplied(tickOn(t, c))
	c.AssertSameDigest(t)
	// A node serves clients once it has released its previous run's
	// consumers (Ready): a consumer of its channels registered before
	// that would be released with them, its deliveries taken back.
	for _, nd := range c.Nodes {
		select {
		case <-nd.Node().Ready():
		case <-time.After(clustertest.Timeout):
			t.Fatalf("%s not ready to serve after %v", nd.ID, clustertest.Timeout)
		}
	}
	l = c.WaitForLeader(clustertest.Timeout)
	for i, nd := range c.Nodes {
		ch := &proto.ChannelRef{Node: nd.ID, Connection: "c", Channel: 1}
		mustSubmit(t, l, &proto.Command{Cmd: &proto.Command_Consume{Consume: &proto.Consume{Vhost: "/", Queue: fmt.Sprintf("q%d", i),
			Consumer: &proto.ConsumerRef{Channel: ch, Tag: "t"}}}})
	}
	for i, nd := range c.Nodes {
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			if m := sinks[i].missing(want); m > 0 {
				return fmt.Errorf("%d of %d bodies not delivered intact on %s", m, len(want), nd.ID)
			}
			return nil
		})
	}
}

// errNoLeader is a retry of tickOn or publishConfirmed while no node
// leads. They look the leader up with Leader, not WaitForLeader, which
// fails the test after its own Timeout: a leaderless spell while tens of
// MiB move counts against the bound of the retry loop it happens in.
var errNoLeader = errors.New("no leader")

// tickOn commits a tick on the current leader and returns its index. A
// leadership change (tens of MiB moving between the nodes of one process
// can delay heartbeats on a busy machine) is retried: a tick changes
// nothing but the log's time.
func tickOn(t *testing.T, c *clustertest.Cluster) uint64 {
	t.Helper()
	var index uint64
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		l := c.Leader()
		if l == nil {
			return errNoLeader
		}
		res, err := l.SubmitBatch(ctxT(t, clustertest.Timeout), []*proto.Command{tick()})
		if err != nil {
			return err
		}
		index = res[0].GetIndex()
		return nil
	})
	return index
}

// publishConfirmed submits a publish until it is confirmed, on a follower
// (forwarded to the leader) or on the leader, and returns its index. An
// outcome lost to a leadership change is published again, as a publisher
// does after a nack: a duplicate is delivered too, and counts once.
func publishConfirmed(t *testing.T, c *clustertest.Cluster, follower bool, cmd *proto.Command) uint64 {
	t.Helper()
	var index uint64
	clustertest.Eventually(t, 3*clustertest.Timeout, func() error {
		on := c.Leader()
		if on == nil {
			return errNoLeader
		}
		if f := c.Followers(); follower && len(f) > 0 {
			on = f[0]
		}
		res, err := on.SubmitBatch(ctxT(t, clustertest.Timeout), []*proto.Command{cmd})
		if err != nil {
			return err
		}
		if res[0].GetCode() != 0 || !res[0].GetRouted() {
			t.Fatalf("publish: %+v", res[0])
		}
		index = res[0].GetIndex()
		return nil
	})
	return index
}
