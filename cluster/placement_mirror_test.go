package cluster_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/broker"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// placedCluster is three nodes with three queue groups, placement on,
// every node running every group, and grace as their PlaceGrace (0: the
// default); opts are more options of the cluster.
func placedCluster(t *testing.T, grace time.Duration, opts ...clustertest.Option) *clustertest.Cluster {
	t.Helper()
	c := clustertest.New(t, 3, append(opts, clustertest.WithConfig(func(_ int, cfg *cluster.Config) {
		cfg.QueueGroups = 3
		cfg.PlaceQueues = true
		cfg.PlaceGrace = grace
	}))...)
	c.WaitForLeader(clustertest.Timeout)
	for _, nd := range c.Live() {
		<-nd.Ready()
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			var on, users bool
			nd.View(func(m *fsm.Machine) { on, users = m.Placing(), m.Initialized() })
			if got := nd.RunningQueueGroups(); !on || !users || len(got) != 3 {
				return fmt.Errorf("%s: placement %v, defaults %v, groups %v", nd.NodeID(), on, users, got)
			}
			return nil
		})
	}
	return c
}

// inGroupEverywhere waits until every node holds each queue in the group
// the metadata placed it in.
func inGroupEverywhere(t *testing.T, c *clustertest.Cluster, queues []string) {
	t.Helper()
	for _, nd := range c.Live() {
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			for _, q := range queues {
				g, ok := nd.QueuePlacement("/", q)
				if !ok || g == "" {
					return fmt.Errorf("%s: %s not placed", nd.NodeID(), q)
				}
				held := false
				nd.ViewGroup(g, func(m *fsm.Machine) { held = m.HasQueue("/", q) })
				if !held {
					return fmt.Errorf("%s: %s not in its group %s", nd.NodeID(), q, g)
				}
			}
			return nil
		})
	}
}

// A queue the metadata placed whose declaring node never brought it into
// its group (it died, or its client went away, between the two commits)
// comes with the group leader's mirror once the grace it leaves the
// declaring member is over.
func TestPlacement_TheMirrorBringsAQueueItsDeclaringNodeNeverPlaced(t *testing.T) {
	c := placedCluster(t, 0)
	start := time.Now()
	// The metadata log alone, as a node that stopped after its commit.
	mustSubmit(t, c.Nodes[1].Node(), &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{
		Vhost: "/", Name: "orphan", Durable: true}}})
	inGroupEverywhere(t, c, []string{"orphan"})
	t.Logf("in its group on every node %v after its metadata commit", time.Since(start).Round(time.Millisecond))
}

// A burst of declares from every node: each queue ends up in its group,
// and the declaring members place them, not the mirror as well: a
// declare written twice into a group's log is a mirror that did not
// leave the queue to its member (a third of the queues did before). The
// grace is long here, so that no member of a loaded machine takes
// longer to place its queue.
func TestPlacement_ABurstOfDeclaresIsWrittenOnceIntoTheGroups(t *testing.T) {
	c := placedCluster(t, 5*time.Second)
	const each = 40
	var queues []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, nd := range c.Live() {
		b := broker.New(nd, nil)
		for k := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range each {
					q := fmt.Sprintf("burst-%d-%d-%d", i, k, j)
					res, err := b.Submit(ctxT(t, clustertest.Timeout), &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{
						Vhost: "/", Name: q, Durable: true}}})
					if err != nil || res.GetCode() != 0 {
						t.Errorf("declare %s on %s: %v %v", q, nd.NodeID(), res, err)
						return
					}
					mu.Lock()
					queues = append(queues, q)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	inGroupEverywhere(t, c, queues)
	n := c.Nodes[0].Node()
	written := map[string]int{}
	for _, id := range n.RunningQueueGroups() {
		if err := n.GroupLogEntries(id, func(_ uint64, env *proto.Envelope) bool {
			for _, cmd := range env.GetCommands() {
				if d := cmd.GetQueueDeclare(); d != nil && !d.GetPassive() {
					written[d.GetName()]++
				}
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}
	twice := 0
	for _, q := range queues {
		if written[q] > 1 {
			twice++
		}
	}
	if twice > 0 {
		t.Fatalf("%d of %d queues declared more than once in their group's log", twice, len(queues))
	}
}
