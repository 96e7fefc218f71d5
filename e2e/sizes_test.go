package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Real clusters of 1, 3, 5 and 7 nodes with --queue-groups 3
// --place-queues: each runs the metadata group and three queue groups of
// min(3, nodes) members, spread so that every node is a member of one
// and the leaders are on different nodes; queues are placed in them, and
// messages published on the first node, dead-lettered from a queue of
// one group into a queue of another and consumed on the last node arrive
// each once. The five-node cluster is the three-node one with nodes 4
// and 5 added while it runs: they are given groups.
func TestPlacement_OneThreeFiveAndSevenNodes(t *testing.T) {
	skipShort(t)
	placing := func(_ int, n *Node) { n.ExtraArgs = append(n.ExtraArgs, "--queue-groups", "3", "--place-queues") }
	t.Run("1 node", func(t *testing.T) {
		c := StartClusterWith(t, 1, placing)
		sized(t, c, "one")
	})
	t.Run("3 nodes grown to 5", func(t *testing.T) {
		c := StartClusterWith(t, 3, placing)
		sized(t, c, "three")
		for _, id := range []string{"n4", "n5"} {
			placing(0, c.AddNode(id))
			c.Start(len(c.Nodes) - 1)
			c.WaitReady(len(c.Nodes)-1, 60*time.Second)
		}
		sized(t, c, "five")
	})
	t.Run("7 nodes", func(t *testing.T) {
		c := StartClusterWith(t, 7, placing)
		sized(t, c, "seven")
	})
}

// sized checks what TestPlacement_OneThreeFiveAndSevenNodes says of c,
// naming its queues after tag.
func sized(t *testing.T, c *Cluster, tag string) {
	t.Helper()
	size := len(c.Nodes)
	members := min(3, size)
	if err := Eventually(90*time.Second, func() error {
		gs, err := groupsOn(t, c.Nodes[size-1])
		if err != nil {
			return err
		}
		in := map[string]bool{}
		leaders := map[string]bool{}
		for _, id := range []string{"q1", "q2", "q3"} {
			g, ok := gs[id]
			if !ok {
				return fmt.Errorf("no group %s: %v", id, gs)
			}
			if len(g.Members) != members || len(g.Online) != members || !slices.Contains(g.Members, g.Leader) {
				return fmt.Errorf("group %+v, want %d members online and one of them leading", g, members)
			}
			for _, m := range g.Members {
				in[m] = true
			}
			leaders[g.Leader] = true
		}
		for _, n := range c.Nodes {
			if !in[n.ID] {
				return fmt.Errorf("%s is a member of no queue group: %v", n.ID, gs)
			}
		}
		if len(leaders) != min(3, size) {
			return fmt.Errorf("queue groups led by %v, want %d nodes", leaders, min(3, size))
		}
		t.Logf("%d nodes: queue groups %v", size, gs)
		return nil
	}); err != nil {
		t.Fatalf("%d nodes: %v", size, err)
	}

	waitPlacing(t, c, tag+".probe", 3, members)
	src, dst, dlx := tag+".src", tag+".dst", tag+".dlx"
	ch := channel(t, dial(t, c.Nodes[0]))
	declareDeadLetters(t, ch, src, 300*time.Millisecond, dlx, dst)
	rows, err := queuesOn(t, c.Nodes[size/2])
	if err != nil {
		t.Fatal(err)
	}
	if a, b := rows[src].Group, rows[dst].Group; a == metadataGroup || b == metadataGroup || a == "" || a == b {
		t.Fatalf("%d nodes: %s in %q and %s in %q, want two queue groups", size, src, a, dst, b)
	}

	cons := channel(t, dial(t, c.Nodes[size-1]))
	deliveries, err := cons.Consume(dst, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	msgs := make([]amqp.Publishing, n)
	for i := range msgs {
		msgs[i] = amqp.Publishing{Body: []byte(fmt.Sprint(i)), DeliveryMode: amqp.Persistent}
	}
	publishConfirmed(t, ch, "", src, msgs)
	seen := map[string]bool{}
	for _, m := range receive(t, deliveries, n, 60*time.Second) {
		if seen[string(m.Body)] || m.Redelivered {
			t.Fatalf("%d nodes: message %s again (redelivered %v)", size, m.Body, m.Redelivered)
		}
		seen[string(m.Body)] = true
		if err := m.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	expectNothing(t, deliveries, 300*time.Millisecond)
}
