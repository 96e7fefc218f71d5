package cluster_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// deliveries records the deliveries addressed to one node, bodies and all.
type deliveries struct {
	mu     sync.Mutex
	bodies map[string]int // body -> times delivered
	// lastTag is the highest delivery tag seen: a channel opened on a
	// node once declared down numbers its tags from above every tag
	// given before (fsm's tag floor), not from 1.
	lastTag uint64
}

func (d *deliveries) Deliver(x *fsm.Delivery) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.bodies == nil {
		d.bodies = map[string]int{}
	}
	d.bodies[string(x.Body)]++
	d.lastTag = max(d.lastTag, x.DeliveryTag)
}

func (d *deliveries) highestTag() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lastTag
}
func (d *deliveries) ConsumerCancelled(*proto.ConsumerRef)                 {}
func (d *deliveries) NodeDown(string)                                      {}
func (d *deliveries) ChannelTimedOut(*proto.ChannelRef, int64)             {}
func (d *deliveries) ConsumerTimedOut(*proto.ConsumerRef, int64, []uint64) {}

func (d *deliveries) missing(want []string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, w := range want {
		if d.bodies[w] == 0 {
			out = append(out, w)
		}
	}
	return out
}

// bodyOf makes message i's body: distinct, of a size that varies.
func bodyOf(i int) string {
	return fmt.Sprintf("m%05d-", i) + strings.Repeat(string(rune('a'+i%26)), 100+(i*37)%3000)
}

// dirNames lists the regular files under dir with their sizes.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		if info, err := e.Info(); err == nil {
			out = append(out, fmt.Sprintf("%s=%d", strings.TrimPrefix(path, dir+"/"), info.Size()))
		}
		return nil
	})
	return out
}

// dirSize is the size of the regular files under dir.
func dirSize(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		info, err := e.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return n
}

// awaitInstalledSnapshot fails the test unless n, restarted while its
// leader compacted the log, caught up by installing a snapshot. raft
// records an installed snapshot only after the state machine restored
// it, so a node can have applied past it, and agree on the digest, a
// moment before its stats show it: the check waits for raft's own
// applied index to reach the state machine's first.
func awaitInstalledSnapshot(t *testing.T, n *cluster.Node) {
	t.Helper()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		s := n.Stats()
		if s.AppliedIndex < s.FSMIndex {
			return fmt.Errorf("raft has applied %d, the state machine %d", s.AppliedIndex, s.FSMIndex)
		}
		if s.LastSnapshotIndex == 0 {
			return fmt.Errorf("the restarted node caught up without a snapshot: %+v", s)
		}
		return nil
	})
}

// A backlog lives in the log and the body files, not in snapshots: a
// follower that was down while the leader compacted its log installs the
// snapshot with the bodies it names, delivers every one intact after a
// restart, and once the backlog is consumed the body files are gone.
func TestCluster_BacklogBodiesSurviveCompactionAndInstall(t *testing.T) {
	for _, store := range []string{cluster.LogStoreWAL, cluster.LogStoreBolt} {
		t.Run(store, func(t *testing.T) { testBacklogBodies(t, store) })
	}
}

func testBacklogBodies(t *testing.T, store string) {
	sinks := []*deliveries{{}, {}, {}}
	c := clustertest.New(t, 3, clustertest.WithSnapshotThreshold(32),
		clustertest.WithConfig(func(i int, c *cluster.Config) {
			c.LogStore = store
			c.Effects = sinks[i]
			// With one follower killed, the leader keeps its lease only
			// while the other answers within it, and the submits below
			// go to that leader: clustertest's 150 ms lease is missed on
			// a loaded machine under -race (bolt's fsyncs of the
			// bodies), and what this test asks of the bodies does not
			// depend on how fast a leader steps down.
			c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
		}))
	submitOK(t, c, queueDeclare("/", "q"))
	l := c.WaitForLeader(clustertest.Timeout)
	victim := c.Followers()[0]
	vi := c.Index(victim.NodeID())
	c.Kill(vi)

	var want []string
	var bodyBytes int64
	var lastPublish uint64
	for i := 0; i < 300; i += 3 {
		var cmds []*proto.Command
		for j := i; j < i+3; j++ {
			b := bodyOf(j)
			want = append(want, b)
			bodyBytes += int64(len(b))
			cmds = append(cmds, publish("/", "q", b))
		}
		lastPublish = mustSubmit(t, l, cmds...)[0].GetIndex()
	}
	for range 100 { // more entries, so the publishes fall behind the trailing logs
		mustSubmit(t, l, tick())
	}
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if s := l.Stats(); s.LastSnapshotIndex < lastPublish+50 {
			return fmt.Errorf("leader snapshot at %d", s.LastSnapshotIndex)
		}
		return nil
	})
	dir := c.Nodes[c.Index(l.NodeID())].Config.DataDir
	if n := dirSize(t, filepath.Join(dir, "snapshots")); n > bodyBytes/4 {
		t.Fatalf("the leader's snapshots hold %d bytes for %d bytes of bodies", n, bodyBytes)
	}

	c.Restart(vi)
	back := c.Nodes[vi].Node()
	res := mustSubmit(t, l, tick())
	c.WaitApplied(res[0].GetIndex())
	c.AssertSameDigest(t)
	if store == cluster.LogStoreBolt {
		awaitInstalledSnapshot(t, back)
	}
	// Restart it once more: now the bodies come from its own store.
	c.Kill(vi)
	c.Restart(vi)
	back = c.Nodes[vi].Node()
	res = mustSubmit(t, l, tick())
	c.WaitApplied(res[0].GetIndex())

	// A restarted node releases its previous run's consumers (NodeDown
	// for itself) before it serves: a consumer registered before that
	// commits is released with them, as the AMQP listener knows.
	select {
	case <-back.Ready():
	case <-time.After(clustertest.Timeout):
		t.Fatalf("%s never became ready after its restart", back.NodeID())
	}
	ch := &proto.ChannelRef{Node: back.NodeID(), Connection: "c", Channel: 1}
	mustSubmit(t, l, &proto.Command{Cmd: &proto.Command_Consume{Consume: &proto.Consume{Vhost: "/", Queue: "q",
		Consumer: &proto.ConsumerRef{Channel: ch, Tag: "t"}}}})
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if m := sinks[vi].missing(want); len(m) > 0 {
			return fmt.Errorf("%d of %d bodies not delivered intact on %s", len(m), len(want), back.NodeID())
		}
		return nil
	})
	mustSubmit(t, l, &proto.Command{Cmd: &proto.Command_Settle{Settle: &proto.Settle{Channel: ch, DeliveryTag: sinks[vi].highestTag(), Multiple: true}}})
	// Nothing is queued: every node's body files are reclaimed, though
	// nothing more is written (reclaimLoop snapshots once the bodies are
	// gone).
	for _, nd := range c.Nodes {
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			if n := dirSize(t, filepath.Join(nd.Config.DataDir, "bodies")); n > 64<<10 {
				s := nd.Node().Stats()
				var queued uint64
				nd.Node().View(func(m *fsm.Machine) {
					st := m.Stats()
					queued = st.Ready + st.Unacked
				})
				return fmt.Errorf("%s keeps %d bytes of body files with %d queued (victim %s; %s, applied %d, last snapshot %d; files %v)",
					nd.ID, n, queued, back.NodeID(), s.State, s.FSMIndex, s.LastSnapshotIndex, dirNames(t, filepath.Join(nd.Config.DataDir, "bodies")))
			}
			return nil
		})
	}
}
