package main

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// TestListGroups_QueueGroups: a lone node asked for two queue groups
// runs both (itself their one member) and leads them; list_groups shows
// them after the metadata group, each with its own raft state and a
// target of the members the log names.
func TestListGroups_QueueGroups(t *testing.T) {
	c := clustertest.New(t, 1, clustertest.WithConfig(func(_ int, cfg *cluster.Config) { cfg.QueueGroups = 2 }))
	n := c.WaitForLeader(clustertest.Timeout)
	addr := serveAdmin(t, ops.New(ops.Deps{Node: ops.FromCluster(n)}))
	id := n.NodeID()
	var want []string
	for _, g := range []string{"metadata", "q1", "q2"} {
		want = append(want, fmt.Sprintf("%s %s [%q] Leader 1", g, id, id))
	}
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		code, out, errs := ctl(t, addr, "--quiet", "list_groups", "name", "leader", "members", "state", "target_size")
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			got = append(got, strings.Join(strings.Fields(l), " "))
		}
		if code != exitOK || strings.Join(got, "\n") != strings.Join(want, "\n") {
			return fmt.Errorf("exit %d, %q %s; want %q", code, out, errs, want)
		}
		return nil
	})
}

// adminPeers are the Admin services a test serves for the nodes, by the
// gRPC address each node announces.
type adminPeers map[string]string

func (p adminPeers) Admin(addr string) (proto.AdminClient, error) {
	conn, err := grpc.NewClient(p[addr], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return proto.NewAdminClient(conn), nil
}

// TestRebalance_QueueGroups: three nodes, three queue groups whose
// leaderships stay where their elections put them (no hand-back for an
// hour); rebalance, asked of any node, moves each group's leadership to
// the member the log names first, also on the nodes that do not lead
// the metadata group, so that each node leads one queue group.
func TestRebalance_QueueGroups(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithConfig(func(_ int, cfg *cluster.Config) {
		cfg.QueueGroups = 3
		cfg.LeadershipBalanceAfter = time.Hour
	}))
	c.WaitForLeader(clustertest.Timeout)
	peers := adminPeers{}
	var addrs []string
	for _, nd := range c.Nodes {
		svc := ops.New(ops.Deps{Node: ops.FromCluster(nd.Node()), Peers: peers})
		t.Cleanup(func() { _ = svc.Close() })
		addr := serveAdmin(t, svc)
		peers[nd.Config.GRPCAddr] = addr
		addrs = append(addrs, addr)
	}
	// leaders is each queue group's leader as its members agree, and
	// the member meant to lead it.
	leaders := func() (map[string]string, map[string]string, error) {
		led, meant := map[string]string{}, map[string]string{}
		for _, nd := range c.Nodes {
			n := nd.Node()
			var specs []fsm.QueueGroup
			n.View(func(m *fsm.Machine) { specs = m.QueueGroups() })
			if len(specs) != 3 {
				return nil, nil, fmt.Errorf("%s: %d groups", n.NodeID(), len(specs))
			}
			for _, s := range specs {
				meant[s.ID] = s.Members[0].ID
			}
			gs := n.Groups()
			if len(gs) != 4 {
				return nil, nil, fmt.Errorf("%s runs %d groups", n.NodeID(), len(gs))
			}
			for _, g := range gs[1:] {
				if g.Leader == "" || led[g.ID] != "" && led[g.ID] != g.Leader {
					return nil, nil, fmt.Errorf("group %s: leaders %q, %q", g.ID, g.Leader, led[g.ID])
				}
				led[g.ID] = g.Leader
			}
		}
		return led, meant, nil
	}
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		_, _, err := leaders()
		return err
	})
	// rebalance runs on the metadata leader: a moment without one (a
	// loaded machine) answers Unavailable, and an operator runs it again.
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		code, out, errs := ctl(t, addrs[2], "rebalance")
		switch {
		case code == exitOK:
			return nil
		case strings.Contains(errs, "Unavailable"):
			return fmt.Errorf("rebalance: exit %d %q %q", code, out, errs)
		}
		t.Fatalf("rebalance: exit %d %q %q", code, out, errs)
		return nil
	})
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		led, meant, err := leaders()
		if err == nil && !maps.Equal(led, meant) {
			err = fmt.Errorf("leaders %v, meant %v", led, meant)
		}
		return err
	})
}
