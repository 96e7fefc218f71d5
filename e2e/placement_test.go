package e2e

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// queueRow is a row of `raftmqctl --json list_queues name raft_group
// leader members messages`.
type queueRow struct {
	Name     string   `json:"name"`
	Group    string   `json:"raft_group"`
	Leader   string   `json:"leader"`
	Members  []string `json:"members"`
	Messages int      `json:"messages"`
}

// metadataGroup is the metadata group's name on the operator surfaces.
const metadataGroup = "metadata"

func queuesOn(t *testing.T, n *Node) (map[string]queueRow, error) {
	return ctlRows(t, n, func(r queueRow) string { return r.Name }, "list_queues", "name", "raft_group", "leader", "members", "messages")
}

// Three real nodes started with --queue-groups 3 --place-queues place
// the queues declared through AMQP into the queue groups, each led by
// its group's leader as raftmqctl shows. Confirmed publishes to a placed
// queue survive a kill -9 of its group's leader in the middle of them:
// a consumer on another node receives every one, none twice without the
// redelivered flag, in the order published.
func TestPlacement_RealNodesServePlacedQueuesThroughAGroupLeaderKill(t *testing.T) {
	skipShort(t)
	c := placed3.start(t)
	names := []string{"pl-1", "pl-2", "pl-3"}
	var rows map[string]queueRow
	ch := channel(t, dial(t, c.Nodes[0]))
	for _, q := range names {
		mustDeclare(t, ch, q, nil)
	}
	if err := Eventually(30*time.Second, func() (err error) {
		rows, err = queuesOn(t, c.Nodes[1])
		if err != nil {
			return err
		}
		gs, err := groupsOn(t, c.Nodes[1])
		if err != nil {
			return err
		}
		placed := map[string]bool{}
		for _, q := range names {
			r := rows[q]
			g, ok := gs[r.Group]
			if r.Group == metadataGroup || !ok || r.Leader != g.Leader || !slices.Equal(r.Members, g.Members) {
				return fmt.Errorf("queue %s is not shown in its group with the group's leader: %+v (groups %+v)", q, r, gs)
			}
			placed[r.Group] = true
		}
		if len(placed) != len(names) {
			return fmt.Errorf("three queues placed into %d groups, want one each: %+v", len(placed), rows)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	leader := rows["pl-1"].Leader
	victim := slices.IndexFunc(c.Nodes, func(n *Node) bool { return n.ID == leader })
	if victim < 0 {
		t.Fatalf("pl-1's leader %q is no node of the cluster", leader)
	}
	others := slices.DeleteFunc(slices.Clone(c.Nodes), func(n *Node) bool { return n.ID == leader })

	const total = 300
	msg := func(i int) amqp.Publishing {
		return amqp.Publishing{Body: []byte(fmt.Sprint(i)), DeliveryMode: amqp.Persistent}
	}
	first := make([]amqp.Publishing, total/2)
	for i := range first {
		first[i] = msg(i)
	}
	publishConfirmed(t, channel(t, dial(t, others[0])), "", "pl-1", first)
	c.Kill(victim)
	killed := time.Now()
	second := make([]amqp.Publishing, total/2)
	for i := range second {
		second[i] = msg(total/2 + i)
	}
	publishConfirmed(t, channel(t, dial(t, others[1])), "", "pl-1", second)
	t.Logf("%s (pl-1's leader) killed; the other 150 confirmed %v later", leader, time.Since(killed).Round(time.Millisecond))

	// raftmqctl shows the queue's messages as its group holds them.
	if err := Eventually(30*time.Second, func() error {
		rows, err := queuesOn(t, others[0])
		if err != nil {
			return err
		}
		if r := rows["pl-1"]; r.Messages != total {
			return fmt.Errorf("list_queues shows pl-1 with %d messages, want %d: %+v", r.Messages, total, r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sub := channel(t, dial(t, others[0]))
	if err := sub.Qos(50, 0, false); err != nil {
		t.Fatal(err)
	}
	d, err := sub.Consume("pl-1", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	next := 0
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for len(seen) < total {
		select {
		case m := <-d:
			b := string(m.Body)
			if seen[b] && !m.Redelivered {
				t.Fatalf("%s delivered twice without the redelivered flag", b)
			}
			if !seen[b] && b != fmt.Sprint(next) {
				t.Fatalf("got %s, want %d: out of order", b, next)
			}
			if !seen[b] {
				next++
			}
			seen[b] = true
			if err := m.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatalf("received %d of %d confirmed messages", len(seen), total)
		}
	}
	if err := Eventually(30*time.Second, func() error {
		rows, err := queuesOn(t, others[1])
		if err != nil {
			return err
		}
		if r := rows["pl-1"]; r.Messages != 0 || r.Leader == leader {
			return fmt.Errorf("pl-1 after the drain: %+v", r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c.Start(victim)
	c.WaitReady(victim, 60*time.Second)
}

// waitPlacing returns once c runs groups queue groups and queue probe,
// declared through c's first node (again and again until then), is
// placed in one of members members with a leader, as raftmqctl lists it:
// the metadata leader switches placement on once the groups run, and a
// queue declared before stays in the metadata group.
func waitPlacing(t *testing.T, c *Cluster, probe string, groups, members int) {
	t.Helper()
	if err := Eventually(60*time.Second, func() error {
		gs, err := groupsOn(t, c.Nodes[0])
		if err != nil {
			return err
		}
		if len(gs) != groups+1 {
			return fmt.Errorf("groups %v", gs)
		}
		ch := channel(t, dial(t, c.Nodes[0]))
		defer ch.Close()
		if _, err := ch.QueueDeclare(probe, true, false, false, false, nil); err != nil {
			return err
		}
		rows, err := queuesOn(t, c.Nodes[0])
		if err != nil {
			return err
		}
		if r := rows[probe]; r.Group == metadataGroup || len(r.Members) != members || r.Leader == "" {
			_, _ = ch.QueueDelete(probe, false, false, false)
			return fmt.Errorf("%s not placed yet: %+v", probe, r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// Three real nodes with queues in queue groups, driven by pika: jobs
// declared with x-queue-leader-locator client-local and rejected once
// come back through an x-delayed-message dead-letter exchange after
// their x-delay, each once (the group hands such a dead letter to the
// metadata log, whose delayed exchange holds it).
func TestPlacement_PikaRetriesThroughADelayedExchange(t *testing.T) {
	skipShort(t)
	py := pythonWithPika(t)
	c := placed3.start(t)
	runPika(t, "pika_delayed_retry.py", py, c.Nodes[0].AMQPURL(), c.Nodes[2].AMQPURL())
	rows, err := queuesOn(t, c.Nodes[1])
	if err != nil {
		t.Fatal(err)
	}
	if r := rows["pika-jobs"]; r.Group == metadataGroup || r.Group == "" {
		t.Fatalf("pika-jobs is not in a queue group: %+v", r)
	}
}

// A policy's queue-leader-locator, set with the real rabbitmqadmin,
// places the queues it matches in the declaring node's groups, over an
// x-queue-leader-locator argument, as RabbitMQ has a policy's value win;
// a name RabbitMQ does not know is refused. Each node is meant to lead
// one of the three groups, so the two queues declared through a node
// share a group, and the three nodes' groups differ, where balanced
// placement would spread the two apart.
func TestPlacement_LocatorPolicyThroughRabbitmqadmin(t *testing.T) {
	skipShort(t)
	bin, err := exec.LookPath("rabbitmqadmin")
	if err != nil {
		t.Skip("rabbitmqadmin not found (Debian's rabbitmq-server package provides /usr/bin/rabbitmqadmin)")
	}
	c := placed3.start(t)
	rabbitmqadmin(t, bin, c.Nodes[1], "declare", "policy", "name=near", `pattern=^near\.`, "apply-to=queues",
		`definition={"queue-leader-locator":"client-local"}`)
	host, port, err := net.SplitHostPort(c.Nodes[1].ManagementAddr)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-H", host, "-P", port, "-u", "guest", "-p", "guest", "declare", "policy", "name=odd",
		"pattern=^odd$", `definition={"queue-leader-locator":"nearest"}`).CombinedOutput(); err == nil {
		t.Fatalf("a policy with queue-leader-locator nearest was taken: %s", out)
	}
	for _, n := range c.Nodes {
		ch := channel(t, dial(t, n))
		mustDeclare(t, ch, "near."+n.ID+".a", nil)
		mustDeclare(t, ch, "near."+n.ID+".b", amqp.Table{"x-queue-leader-locator": "balanced"})
	}
	var rows map[string]queueRow
	if err := Eventually(30*time.Second, func() (err error) {
		rows, err = queuesOn(t, c.Nodes[2])
		if err != nil {
			return err
		}
		for _, n := range c.Nodes {
			for _, q := range []string{"near." + n.ID + ".a", "near." + n.ID + ".b"} {
				if rows[q].Group == "" {
					return fmt.Errorf("%s not listed with its group yet: %+v", q, rows)
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	groups := map[string]string{}
	for _, n := range c.Nodes {
		a, b := rows["near."+n.ID+".a"].Group, rows["near."+n.ID+".b"].Group
		if a == metadataGroup || a == "" || a != b {
			t.Fatalf("the queues declared through %s are in groups %q and %q, want one queue group: %+v", n.ID, a, b, rows)
		}
		if other, ok := groups[a]; ok {
			t.Fatalf("the queues declared through %s and %s share group %s", other, n.ID, a)
		}
		groups[a] = n.ID
	}
}

// A lease expires the queues placed in queue groups as RabbitMQ's does,
// on three real nodes, whether it is a policy's expires set with
// raftmqctl or a queue's own x-expires: an unused queue goes after the
// lease's time with its messages and its bindings, one with a consumer on
// another node stays until the consumer leaves, and the queue declared
// again is a new, empty one that the old binding no longer reaches.
func TestPlacement_LeasesExpirePlacedQueues(t *testing.T) {
	skipShort(t)
	c := placed3.start(t)
	t.Run("x-expires", func(t *testing.T) {
		leasesExpirePlaced(t, c, "own.", 3*time.Second, amqp.Table{"x-expires": int32(3000)}, nil)
	})
	t.Run("expires policy", func(t *testing.T) {
		leasesExpirePlaced(t, c, "exp.", time.Second, nil, func() {
			ctl(t, c.Nodes[1], "set_policy", "EXP", `^exp\.`, `{"expires":1000}`, "--apply-to", "queues")
		})
		ctl(t, c.Nodes[1], "clear_policy", "EXP")
	})
}

// leasesExpirePlaced declares prefix+"idle" and prefix+"used" with args,
// the first bound and holding three messages, the second consumed from
// another node, and checks what TestPlacement_LeasesExpirePlacedQueues
// says of their lease of length d: begun by their declare when lease is
// nil, else by lease.
func leasesExpirePlaced(t *testing.T, c *Cluster, prefix string, d time.Duration, args amqp.Table, lease func()) {
	idle, used, key := prefix+"idle", prefix+"used", prefix+"key"
	start := time.Now()
	ch := channel(t, dial(t, c.Nodes[0]))
	mustDeclare(t, ch, idle, args)
	mustDeclare(t, ch, used, args)
	if err := ch.QueueBind(idle, key, "amq.direct", false, nil); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "amq.direct", key, []amqp.Publishing{{Body: []byte("1")}, {Body: []byte("2")}, {Body: []byte("3")}})
	cons := channel(t, dial(t, c.Nodes[2]))
	if _, err := cons.Consume(used, "lease-c", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	rows, err := queuesOn(t, c.Nodes[1])
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{idle, used} {
		if g := rows[q].Group; g == metadataGroup || g == "" {
			t.Fatalf("%s is not in a queue group: %+v", q, rows[q])
		}
	}

	if lease != nil {
		start = time.Now()
		lease()
	}
	if err := gone(t, channel(t, dial(t, c.Nodes[1])), idle, 15*time.Second); err != nil {
		t.Fatalf("a lease on a placed queue: %v", err)
	}
	if el := elapsed(start); el < d-100*time.Millisecond {
		t.Fatalf("%s expired %v after its lease began, before its %v", idle, el, d)
	}
	if _, err := channel(t, dial(t, c.Nodes[1])).QueueDeclarePassive(used, true, false, false, false, args); err != nil {
		t.Fatalf("%s, consumed from another node, expired: %v", used, err)
	}

	again := channel(t, dial(t, c.Nodes[1]))
	q, err := again.QueueDeclare(idle, true, false, false, false, args)
	if err != nil || q.Messages != 0 {
		t.Fatalf("%s declared again: %+v %v, want a new empty queue", idle, q, err)
	}
	returns := again.NotifyReturn(make(chan amqp.Return, 1))
	if err := again.PublishWithContext(context.Background(), "amq.direct", key, true, false, amqp.Publishing{Body: []byte("late")}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-returns:
	case <-time.After(10 * time.Second):
		t.Fatal("the expired queue's binding still routes")
	}

	if err := cons.Cancel("lease-c", false); err != nil {
		t.Fatal(err)
	}
	if err := gone(t, channel(t, dial(t, c.Nodes[0])), used, 15*time.Second); err != nil {
		t.Fatalf("%s after its consumer left: %v", used, err)
	}
}
