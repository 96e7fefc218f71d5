package cluster_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/group"
)

// A node asked to stop hands the leadership of every group it leads (the
// metadata group and its queue groups) to another voter, so that none of
// them waits for its followers to find it silent and elect: once
// HandOver returns, each of those groups is led by another node.
func TestHandOver_AStoppingNodeLeadsNoGroup(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithConfig(following(3)))
	l := c.WaitForLeader(clustertest.Timeout)
	clustertest.Eventually(t, 2*clustertest.Timeout, func() error {
		_, err := followed(c, queueGroupIDs, true)
		return err
	})
	var led []string
	for _, g := range l.Groups() {
		if g.State == "Leader" {
			led = append(led, g.ID)
		}
	}
	if len(led) < 2 {
		t.Fatalf("%s leads %v: the metadata group and one queue group at least were expected", l.NodeID(), led)
	}
	l.HandOver(clustertest.Timeout)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		for _, g := range l.Groups() {
			if g.State == "Leader" {
				return fmt.Errorf("%s still leads %s", l.NodeID(), g.ID)
			}
		}
		for _, id := range led {
			if !slices.ContainsFunc(c.Live(), func(n *cluster.Node) bool {
				return n != l && slices.ContainsFunc(n.Groups(), func(g cluster.GroupStatus) bool { return g.ID == id && g.State == "Leader" })
			}) {
				return fmt.Errorf("no other node leads %s", id)
			}
		}
		return nil
	})
	c.Kill(c.Index(l.NodeID()))
	commitThroughLeaders(t, c, queueGroupIDs)
}

// A stopping node hands its leaderships to a voter its raft reaches, not
// to one that gossip still finds alive: a transfer to a voter that does
// not answer fails only after raft's transfer timeout, and the group
// then waits for an election as if there had been no hand-over. A node
// stopped a moment before is such a voter, as when an operator stops a
// cluster node by node: gossip takes a probe and a suspicion to find it
// gone, raft's next heartbeat to it fails. Here it is the metadata
// leader, whose own count of whom it reaches tells the others nothing
// once it is gone.
func TestHandOver_PassesOverAVoterJustStopped(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithConfig(following(3)))
	l := c.WaitForLeader(clustertest.Timeout)
	clustertest.Eventually(t, 2*clustertest.Timeout, func() error {
		_, err := followed(c, queueGroupIDs, true)
		return err
	})
	// A queue group led by another node, which would try the metadata
	// leader first.
	var n *cluster.Node
	var qx string
	for _, x := range c.Live() {
		for _, g := range x.Groups() {
			if x == l || g.ID == group.DefaultID || g.State != "Leader" {
				continue
			}
			if order := slices.DeleteFunc(x.ConfigOrder(g.ID), func(id string) bool { return id == x.NodeID() }); len(order) > 0 && order[0] == l.NodeID() {
				n, qx = x, g.ID
			}
		}
	}
	if n == nil {
		t.Fatalf("no queue group is led by a node that would hand it to %s first", l.NodeID())
	}
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		for _, id := range n.ConfigOrder(qx) {
			if id != n.NodeID() && !n.Reached(qx, id) {
				return fmt.Errorf("%s, leading %s, has not reached %s yet", n.NodeID(), qx, id)
			}
		}
		return nil
	})
	// The node stops as a process does, while its peers watch.
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		c.Kill(c.Index(l.NodeID()))
	}()
	defer func() { <-killed }()
	// raft's next heartbeat, a few ms away, finds it gone.
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if n.Reached(qx, l.NodeID()) {
			return fmt.Errorf("%s's raft still reaches %s", n.NodeID(), l.NodeID())
		}
		return nil
	})
	if !slices.ContainsFunc(n.Members(), func(m cluster.MemberInfo) bool { return m.ID == l.NodeID() && m.Health == cluster.HealthAlive }) {
		t.Fatalf("gossip found %s gone before %s's raft did: the test needs a voter that gossip still vouches for", l.NodeID(), n.NodeID())
	}
	n.HandOver(clustertest.Timeout)
	// Straight after the hand-over: no election was waited for.
	if slices.ContainsFunc(n.Groups(), func(g cluster.GroupStatus) bool { return g.ID == qx && g.State == "Leader" }) {
		t.Fatalf("%s still leads %s after handing it over", n.NodeID(), qx)
	}
}

// A stopping leader's hand-over leaves no other node's command in doubt.
// raft's transfer refuses new entries (not appended: their callers try
// again, and find the next leader) and brings the successor up to the
// leader's last entry before it stands, so every entry in flight
// commits and is answered; the node then closes, as the raftmq command
// closes it (clustertest.Stop). A leader that stops
// without it breaks the streams that forward other nodes' commands to
// it, and those callers learn only that the outcome is unknown (a
// publish nacked, a queue.delete closed with 541).
func TestHandOver_LeavesNoCommandInDoubt(t *testing.T) {
	c := clustertest.New(t, 3)
	l := c.WaitForLeader(clustertest.Timeout)
	stop := make(chan struct{})
	var mu sync.Mutex
	var unknown []error
	var done, wg sync.WaitGroup
	for _, n := range c.Live() {
		if n == l {
			continue // its own clients close before its hand-over
		}
		for range 6 {
			wg.Add(1)
			done.Add(1)
			go func() {
				defer wg.Done()
				first := true
				for {
					select {
					case <-stop:
						return
					default:
					}
					_, err := n.Submit(ctxT(t, clustertest.Timeout), tick())
					if errors.Is(err, group.ErrOutcomeUnknown) {
						mu.Lock()
						unknown = append(unknown, fmt.Errorf("%s: %w", n.NodeID(), err))
						mu.Unlock()
					}
					if first {
						first = false
						done.Done()
					}
				}
			}()
		}
	}
	done.Wait() // every submitter has had a command answered
	l.HandOver(clustertest.Timeout)
	led := slices.ContainsFunc(l.Groups(), func(g cluster.GroupStatus) bool { return g.ID == group.DefaultID && g.State == "Leader" })
	c.Stop(c.Index(l.NodeID()))
	close(stop)
	wg.Wait()
	if len(unknown) > 0 {
		t.Fatalf("%d commands' outcome unknown across the stop, the first: %v", len(unknown), unknown[0])
	}
	if led {
		t.Fatalf("%s still leads after handing over", l.NodeID())
	}
}
