package e2e

import (
	"fmt"
	"os"
	"testing"
)

// A shape is a cluster a test runs on: its size, and where its queues
// live. A raftmq binary started with nothing configured keeps every queue
// in its one metadata log; the deploy files (compose, Kubernetes,
// systemd) start a queue group per node and place new queues in them
// (deploy/README.md). The two take different paths through the nodes: a
// placed queue's messages, deaths, leases, delayed releases and
// consumers are its group's, dead letters cross from one log to another,
// and a node outside a queue's group serves it through the group's
// members. The TTL, delayed-delivery, retry and queue-feature tests run
// on both, and so do the fanout across nodes and the consumer whose node
// is killed.
type shape struct {
	nodes  int
	groups bool
}

func (s shape) String() string {
	if s.groups {
		return fmt.Sprintf("%d nodes, queue groups", s.nodes)
	}
	return fmt.Sprintf("%d nodes", s.nodes)
}

// setup is StartClusterWith's: the flags of a queue group per node with
// new queues placed in them, as the deploy files give.
func (s shape) setup(_ int, n *Node) {
	if s.groups {
		n.ExtraArgs = append(n.ExtraArgs, "--queue-groups", "per-node", "--place-queues")
	}
}

// start starts a cluster of the shape. One with queue groups is handed
// over once it places queues (waitPlacing): a queue declared before the
// metadata leader switched placement on would stay in the metadata log,
// and the test would try nothing of the groups.
func (s shape) start(t *testing.T) *Cluster {
	t.Helper()
	return s.startWith(t, nil)
}

// startWith is start with setup called for each node after the shape's
// own (StartClusterWith's).
func (s shape) startWith(t *testing.T, setup func(i int, n *Node)) *Cluster {
	t.Helper()
	c := StartClusterWith(t, s.nodes, func(i int, n *Node) {
		s.setup(i, n)
		if setup != nil {
			setup(i, n)
		}
	})
	if s.groups {
		waitPlacing(t, c, "shape.probe", s.nodes, min(3, s.nodes))
		ch := channel(t, dial(t, c.Nodes[0]))
		if _, err := ch.QueueDelete("shape.probe", false, false, false); err != nil {
			t.Fatalf("deleting the probe: %v", err)
		}
	}
	return c
}

// everyShape is three and five nodes, each with one log and with queue
// groups.
var everyShape = []shape{{3, false}, {5, false}, {3, true}, {5, true}}

// placed3 is three nodes with queue groups: the cluster of the tests of
// placement itself and of the clients (Java, .NET, kombu, Bunny,
// amqp-tools) that run on queue groups only.
var placed3 = shape{3, true}

// twoShapes are three nodes with one log and five with queue groups:
// each size and each kind of log once, for the tests whose checks do not
// depend on the size.
var twoShapes = []shape{{3, false}, {5, true}}

// forShapes runs f as a subtest on each shape. Against RabbitMQ
// (RAFTMQ_E2E_RABBITMQ, brokersIn) the shapes mean nothing, and f runs
// once, on the first.
func forShapes(t *testing.T, shapes []shape, f func(t *testing.T, s shape)) {
	t.Helper()
	if os.Getenv("RAFTMQ_E2E_RABBITMQ") != "" {
		shapes = shapes[:1]
	}
	for _, s := range shapes {
		t.Run(s.String(), func(t *testing.T) { f(t, s) })
	}
}
