package cluster_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
)

func protocolLevel(n *cluster.Node) uint32 {
	var l uint32
	n.View(func(m *fsm.Machine) { l = m.ProtocolLevel() })
	return l
}

func waitLevel(t *testing.T, c *clustertest.Cluster, want uint32) {
	t.Helper()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		for _, n := range c.Live() {
			if got := protocolLevel(n); got != want {
				return fmt.Errorf("%s is at protocol level %d, want %d", n.NodeID(), got, want)
			}
		}
		return nil
	})
}

// A new cluster's log is at this binary's protocol level right after
// bootstrap: every server announces it.
func TestProtocol_NewClusterReachesTheCurrentLevel(t *testing.T) {
	c := clustertest.New(t, 3)
	c.WaitForLeader(clustertest.Timeout)
	waitLevel(t, c, fsm.Protocol)
	c.AssertSameDigest(t)
}

// While one server announces the first protocol (a node of the previous
// release during a rolling upgrade), the log stays at level 1; once it
// comes back upgraded, the leader raises the level, and every replica
// agrees.
func TestProtocol_RaisedWhenTheLastServerAnnouncesIt(t *testing.T) {
	const old = 2
	c := clustertest.New(t, 3, clustertest.WithConfig(func(i int, cfg *cluster.Config) {
		if i == old {
			cfg.Protocol = 1
		}
	}))
	l := c.WaitForLeader(clustertest.Timeout)
	// The leader has node2 in its configuration and has heard what it
	// announces: a round of its check decides with everything known.
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		for _, m := range l.Members() {
			if m.ID == c.Nodes[old].ID && (m.Suffrage != "voter" || m.Protocol != 1) {
				return fmt.Errorf("the leader sees %+v", m)
			}
		}
		return nil
	})
	l.RaiseProtocol(ctxT(t, 10*time.Second))
	res := mustSubmit(t, l, tick())
	c.WaitApplied(res[0].GetIndex())
	for _, n := range c.Live() {
		if got := protocolLevel(n); got != 1 {
			t.Fatalf("%s is at protocol level %d while %s announces 1", n.NodeID(), got, c.Nodes[old].ID)
		}
	}

	c.Kill(old)
	c.Nodes[old].Config.Protocol = fsm.Protocol
	c.Restart(old)
	waitLevel(t, c, fsm.Protocol)
	c.AssertSameDigest(t)
}

// A node cannot announce a protocol it does not apply: the leader would
// let in what it cannot apply.
func TestProtocol_ConfigAboveThisBinaryIsRefused(t *testing.T) {
	_, err := cluster.Start(ctxT(t, 10*time.Second), cluster.Config{NodeID: "n", DataDir: t.TempDir(),
		GroupConfig: cluster.GroupConfig{
			RaftAddr: "127.0.0.1:0",
		},
		MembershipConfig: cluster.MembershipConfig{
			GossipAddr: "127.0.0.1:0",
		},
		Protocol: fsm.Protocol + 1})
	if err == nil {
		t.Fatal("started announcing a protocol above this binary's")
	}
}
