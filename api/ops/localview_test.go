package ops_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
)

// A login and a readiness check read only what the node holds: on a node
// of five that does not run every queue group, cut off from the others
// (links that carry nothing, as a dropped network gives), they answer at
// once. Reading the groups it does not run from their members (View)
// waits for a member that does not answer, a second per member asked:
// every admin call and health probe did, since each logs in or checks
// readiness first.
func TestLocalView_ALoginAsksNoOtherNode(t *testing.T) {
	c := clustertest.New(t, 5, clustertest.WithConfig(func(_ int, cfg *cluster.Config) {
		cfg.QueueGroups = 3
		cfg.PlaceQueues = true
	}))
	c.WaitForLeader(clustertest.Timeout)
	var far *cluster.Node
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		for _, n := range c.Live() {
			var on, users bool
			n.View(func(m *fsm.Machine) { on, users = m.Placing(), m.Initialized() })
			if !on || !users {
				return fmt.Errorf("%s: placement %v, defaults %v", n.NodeID(), on, users)
			}
		}
		for _, n := range c.Live() {
			running := n.RunningQueueGroups()
			for _, id := range n.NamedQueueGroups() {
				if !slices.Contains(running, id) {
					far = n
					return nil
				}
			}
		}
		return errors.New("every node runs every group it knows")
	})
	node := ops.FromCluster(far)
	c.Freeze(far.NodeID())
	defer c.Heal()

	start := time.Now()
	if _, ok := ops.Authenticate(node, "guest", "guest"); !ok {
		t.Fatal("guest/guest refused")
	}
	if _, ok := ops.Authenticate(node, "guest", "wrong"); ok {
		t.Fatal("a wrong password accepted")
	}
	_ = ops.NotReady(node)
	// A second is what one unanswered member costs a read of the groups
	// far from this node; the local reads take microseconds.
	if took := time.Since(start); took >= time.Second {
		t.Fatalf("two logins and a readiness check on a node cut off took %v", took.Round(time.Millisecond))
	}
}
