package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The queue feature tests (priorities, delivery limit, single active
// consumer, refused arguments) run against raftmq clusters of three nodes
// with one log and five with queue groups (twoShapes), or, with
// RAFTMQ_E2E_RABBITMQ set to an AMQP URL, against that RabbitMQ, so that
// each expectation is checked against RabbitMQ itself.

// brokersIn returns an AMQP URL for each node of a new raftmq cluster of
// shape s, and the cluster; or the RabbitMQ of RAFTMQ_E2E_RABBITMQ as
// many times, and nil.
func brokersIn(t *testing.T, s shape) ([]string, *Cluster) {
	t.Helper()
	urls := make([]string, s.nodes)
	if u := os.Getenv("RAFTMQ_E2E_RABBITMQ"); u != "" {
		for i := range urls {
			urls[i] = u
		}
		return urls, nil
	}
	skipShort(t)
	c := s.start(t)
	for i, node := range c.Nodes {
		urls[i] = node.AMQPURL()
	}
	return urls, c
}

// consumerRows lists queue's consumers as "tag active activity_status"
// through raftmqctl on node (or rabbitmqctl for RabbitMQ), sorted (the
// two list in different orders).
func consumerRows(t *testing.T, c *Cluster, node int, queue string) []string {
	t.Helper()
	columns := []string{"list_consumers", "queue_name", "consumer_tag", "active", "activity_status"}
	var out string
	if c == nil {
		b, err := exec.Command("rabbitmqctl", append(columns, "--quiet")...).Output()
		if err != nil {
			t.Fatalf("rabbitmqctl list_consumers: %v", err)
		}
		out = string(b)
	} else {
		out = ctl(t, c.Nodes[node], columns...)
	}
	var rows []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == queue {
			rows = append(rows, strings.Join(f[1:], " "))
		}
	}
	slices.Sort(rows)
	return rows
}

func dialURL(t *testing.T, url string) *amqp.Connection {
	t.Helper()
	var conn *amqp.Connection
	err := Eventually(20*time.Second, func() error {
		c, err := amqp.Dial(url)
		if err != nil {
			return err
		}
		conn = c
		return nil
	})
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// freshQueue declares a queue after deleting any left by an earlier run
// against the same broker, and deletes it when the test ends.
func freshQueue(t *testing.T, ch *amqp.Channel, name string, args amqp.Table) {
	t.Helper()
	if _, err := ch.QueueDelete(name, false, false, false); err != nil {
		t.Fatalf("delete %s: %v", name, err)
	}
	mustDeclare(t, ch, name, args)
	t.Cleanup(func() {
		if _, err := ch.QueueDelete(name, false, false, false); err != nil {
			t.Logf("delete %s: %v", name, err)
		}
	})
}

func TestFeatures_PriorityAcrossNodes(t *testing.T) {
	forShapes(t, twoShapes, priorityAcrossNodes)
}

func priorityAcrossNodes(t *testing.T, s shape) {
	urls, _ := brokersIn(t, s)
	pub := channel(t, dialURL(t, urls[0]))
	freshQueue(t, pub, "feat.prio", amqp.Table{"x-max-priority": int32(10)})
	// Priorities 0..12 cycling (11 and 12 count as 10) and messages
	// without the property (priority 0).
	var msgs []amqp.Publishing
	want := map[int][]string{}
	for i := 0; i < 40; i++ {
		p := i % 13
		m := amqp.Publishing{Body: []byte(fmt.Sprintf("%d/%d", p, i)), Priority: uint8(p)}
		if i%7 == 0 {
			m.Priority, p = 0, 0
			m.Body = []byte(fmt.Sprintf("none/%d", i))
		}
		msgs = append(msgs, m)
		want[min(p, 10)] = append(want[min(p, 10)], string(m.Body))
	}
	publishConfirmed(t, pub, "", "feat.prio", msgs)
	var order []string
	for p := 10; p >= 0; p-- {
		order = append(order, want[p]...)
	}

	// An observer on another node sees them all queued.
	obs := channel(t, dialURL(t, urls[2]))
	if q, err := obs.QueueDeclarePassive("feat.prio", true, false, false, false, nil); err != nil || q.Messages != len(msgs) {
		t.Fatalf("observer: %+v %v", q, err)
	}
	// basic.get on the observer's node takes the highest priority first.
	first, ok, err := obs.Get("feat.prio", false)
	if err != nil || !ok || string(first.Body) != order[0] {
		t.Fatalf("basic.get: %q %v %v, want %q", first.Body, ok, err, order[0])
	}
	// Handed back, it returns to the head of its priority.
	if err := first.Nack(false, true); err != nil {
		t.Fatal(err)
	}

	cons := channel(t, dialURL(t, urls[1]))
	if err := cons.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	d, err := cons.Consume("feat.prio", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range order {
		m := receive(t, d, 1, 30*time.Second)[0]
		if string(m.Body) != w {
			t.Fatalf("delivery %d is %q, want %q (priority %d)", i, m.Body, w, m.Priority)
		}
		if err := m.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	expectNothing(t, d, 300*time.Millisecond)
}

func TestFeatures_DeliveryLimitDeadLettersAcrossNodes(t *testing.T) {
	forShapes(t, twoShapes, deliveryLimitDeadLettersAcrossNodes)
}

func deliveryLimitDeadLettersAcrossNodes(t *testing.T, s shape) {
	urls, _ := brokersIn(t, s)
	pub := channel(t, dialURL(t, urls[0]))
	if err := pub.ExchangeDeclare("feat.dlx", "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	freshQueue(t, pub, "feat.dead", nil)
	if err := pub.QueueBind("feat.dead", "", "feat.dlx", false, nil); err != nil {
		t.Fatal(err)
	}
	// quorum: RabbitMQ 3.10 has delivery limits on quorum queues only; every
	// raftmq queue is replicated alike.
	freshQueue(t, pub, "feat.limited", amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int32(2), "x-dead-letter-exchange": "feat.dlx"})
	publishConfirmed(t, pub, "", "feat.limited", []amqp.Publishing{{Body: []byte("poison")}})

	cons := channel(t, dialURL(t, urls[1]))
	if err := cons.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	d, err := cons.Consume("feat.limited", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		m := receive(t, d, 1, 30*time.Second)[0]
		n, has := HeaderInt(m.Headers, "x-delivery-count")
		if (i == 0 && has) || (i > 0 && (!has || n != int64(i))) || m.Redelivered != (i > 0) {
			t.Fatalf("delivery %d: x-delivery-count %v (%v), redelivered %v", i+1, m.Headers["x-delivery-count"], has, m.Redelivered)
		}
		// A reject: from protocol level 8, as in RabbitMQ 4.3, a nack
		// counts no failed attempt and never reaches the limit.
		if err := m.Reject(true); err != nil {
			t.Fatal(err)
		}
	}
	// The third return passes the limit: dead-lettered, not delivered again.
	obs := channel(t, dialURL(t, urls[2]))
	dead, err := obs.Consume("feat.dead", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := receive(t, dead, 1, 30*time.Second)[0]
	deaths, _ := m.Headers["x-death"].([]any)
	if string(m.Body) != "poison" || len(deaths) != 1 {
		t.Fatalf("dead-lettered %q with x-death %v", m.Body, m.Headers["x-death"])
	}
	death, _ := deaths[0].(amqp.Table)
	if death["reason"] != "delivery_limit" || death["queue"] != "feat.limited" {
		t.Fatalf("x-death %v", death)
	}
	expectNothing(t, d, 300*time.Millisecond)
}

func numbered(from, to int) []amqp.Publishing {
	var out []amqp.Publishing
	for i := from; i < to; i++ {
		out = append(out, amqp.Publishing{Body: []byte(fmt.Sprint(i))})
	}
	return out
}

// expectInOrder receives the messages from..to-1 in order on d, acking
// each unless it is the last and keepLast is set.
func expectInOrder(t *testing.T, who string, d <-chan amqp.Delivery, from, to int, keepLast bool) {
	t.Helper()
	for i := from; i < to; i++ {
		m := receive(t, d, 1, 30*time.Second)[0]
		if string(m.Body) != fmt.Sprint(i) {
			t.Fatalf("%s: got %q, want %d", who, m.Body, i)
		}
		if keepLast && i == to-1 {
			return
		}
		if err := m.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFeatures_SingleActiveConsumerAcrossNodes(t *testing.T) {
	forShapes(t, twoShapes, singleActiveConsumerAcrossNodes)
}

func singleActiveConsumerAcrossNodes(t *testing.T, s shape) {
	urls, cluster := brokersIn(t, s)
	pub := channel(t, dialURL(t, urls[0]))
	freshQueue(t, pub, "feat.sac", amqp.Table{"x-single-active-consumer": true})
	consume := func(url, tag string) (*amqp.Channel, <-chan amqp.Delivery) {
		ch := channel(t, dialURL(t, url))
		if err := ch.Qos(1, 0, false); err != nil {
			t.Fatal(err)
		}
		d, err := ch.Consume("feat.sac", tag, false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return ch, d
	}
	// Registration order decides: a on one node, then b and c elsewhere.
	cha, a := consume(urls[1], "a")
	chb, b := consume(urls[2], "b")
	_, c := consume(urls[0], "c")

	// The listing, read on the publisher's node, shows who is active.
	if rows := strings.Join(consumerRows(t, cluster, 0, "feat.sac"), ", "); rows != "a true single_active, b false waiting, c false waiting" {
		t.Fatalf("list_consumers: %s", rows)
	}
	publishConfirmed(t, pub, "", "feat.sac", numbered(0, 20))
	expectInOrder(t, "a", a, 0, 20, false)
	expectNothing(t, b, 200*time.Millisecond)
	expectNothing(t, c, 0)

	// a cancels: b, next in registration order, takes over.
	if err := cha.Cancel("a", false); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, pub, "", "feat.sac", numbered(20, 30))
	expectInOrder(t, "b", b, 20, 30, true) // holds 29 unacked
	if rows := strings.Join(consumerRows(t, cluster, 0, "feat.sac"), ", "); rows != "b true single_active, c false waiting" {
		t.Fatalf("list_consumers after a's cancel: %s", rows)
	}
	publishConfirmed(t, pub, "", "feat.sac", numbered(30, 35))
	expectNothing(t, c, 200*time.Millisecond)

	// b's channel closes holding 29: it is returned before c takes over,
	// so c gets 29 (redelivered) and the rest in order.
	if err := chb.Close(); err != nil {
		t.Fatal(err)
	}
	m := receive(t, c, 1, 30*time.Second)[0]
	if string(m.Body) != "29" || !m.Redelivered {
		t.Fatalf("c's first delivery %q redelivered=%v, want 29 redelivered", m.Body, m.Redelivered)
	}
	if err := m.Ack(false); err != nil {
		t.Fatal(err)
	}
	expectInOrder(t, "c", c, 30, 35, false)
	expectNothing(t, c, 200*time.Millisecond)
}

// declareErr declares a queue on a channel of its own (a refusal closes
// it) and returns the broker's refusal, nil when accepted.
func declareErr(t *testing.T, conn *amqp.Connection, name string, args amqp.Table) *amqp.Error {
	t.Helper()
	ch := channel(t, conn)
	_, err := ch.QueueDeclare(name, true, false, false, false, args)
	if err == nil {
		if _, err := ch.QueueDelete(name, false, false, false); err != nil {
			t.Fatal(err)
		}
		_ = ch.Close()
		return nil
	}
	var e *amqp.Error
	if !errors.As(err, &e) {
		t.Fatalf("declare %s: %v", name, err)
	}
	return e
}

func TestFeatures_UnsupportedArgumentsRefused(t *testing.T) {
	forShapes(t, twoShapes, unsupportedArgumentsRefused)
}

func unsupportedArgumentsRefused(t *testing.T, s shape) {
	urls, _ := brokersIn(t, s)
	conn := dialURL(t, urls[1])
	// x- arguments RabbitMQ ignores stay accepted.
	if e := declareErr(t, conn, "feat.unknown", amqp.Table{"x-foo": "bar", "x-queue-mode": "lazy"}); e != nil {
		t.Fatalf("unknown x- argument refused: %v", e)
	}
	// A queue type nobody has: 406 from both.
	if e := declareErr(t, conn, "feat.foo", amqp.Table{"x-queue-type": "foo"}); e == nil || e.Code != 406 {
		t.Fatalf("x-queue-type foo: %v", e)
	}
	if os.Getenv("RAFTMQ_E2E_RABBITMQ") != "" {
		t.Log("RabbitMQ has streams: the stream refusals below are raftmq's own")
		return
	}
	e := declareErr(t, conn, "feat.stream", amqp.Table{"x-queue-type": "stream"})
	if e == nil || e.Code != 406 || e.Reason != "PRECONDITION_FAILED - raftmq does not support queue type 'stream'" {
		t.Fatalf("x-queue-type stream: %v", e)
	}
	// An observer on another node finds no such queue.
	obs := channel(t, dialURL(t, urls[0]))
	if _, err := obs.QueueDeclarePassive("feat.stream", true, false, false, false, nil); err == nil {
		t.Fatal("the refused stream queue exists")
	}
	ch := channel(t, conn)
	freshQueue(t, ch, "feat.plain", nil)
	_, err := ch.Consume("feat.plain", "", false, false, false, false, amqp.Table{"x-stream-offset": "first"})
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != 406 || ae.Reason != "PRECONDITION_FAILED - raftmq does not support consumer argument 'x-stream-offset' (stream queues)" {
		t.Fatalf("x-stream-offset: %v", err)
	}
}

// TestFeatures_Pika runs the same features through pika (Debian's
// python3-pika), a client with its own framing and table encoding.
func TestFeatures_Pika(t *testing.T) {
	py := pythonWithPika(t)
	forShapes(t, twoShapes, func(t *testing.T, s shape) {
		urls, _ := brokersIn(t, s)
		runPika(t, "pika_features.py", py, urls...)
	})
}

// Declares and binds RabbitMQ refuses for what they say are refused on every node
// with its code and words (the script's cases pass on RabbitMQ 3.10.8 as
// they stand), and the client's connection goes on.
func TestFeatures_PikaRefusals(t *testing.T) {
	py := pythonWithPika(t)
	forShapes(t, twoShapes, func(t *testing.T, s shape) {
		urls, _ := brokersIn(t, s)
		runPika(t, "pika_refusals.py", py, urls...)
	})
}

func TestFeatures_ConsumerPriorityAcrossNodes(t *testing.T) {
	forShapes(t, twoShapes, consumerPriorityAcrossNodes)
}

func consumerPriorityAcrossNodes(t *testing.T, s shape) {
	urls, _ := brokersIn(t, s)
	pub := channel(t, dialURL(t, urls[0]))
	freshQueue(t, pub, "feat.cprio", nil)
	consume := func(url string, args amqp.Table) <-chan amqp.Delivery {
		ch := channel(t, dialURL(t, url))
		if err := ch.Qos(10, 0, false); err != nil {
			t.Fatal(err)
		}
		d, err := ch.Consume("feat.cprio", "", false, false, false, false, args)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	lo := consume(urls[1], nil)
	hi := consume(urls[2], amqp.Table{"x-priority": int32(10)})
	// All ten fit hi's prefetch: hi gets them, lo none.
	publishConfirmed(t, pub, "", "feat.cprio", numbered(0, 10))
	got := receive(t, hi, 10, 30*time.Second)
	for i, m := range got {
		if string(m.Body) != fmt.Sprint(i) {
			t.Fatalf("hi's delivery %d is %q", i, m.Body)
		}
	}
	// hi is blocked (10 unacked): the next ones go to lo.
	publishConfirmed(t, pub, "", "feat.cprio", numbered(10, 15))
	for i, m := range receive(t, lo, 5, 30*time.Second) {
		if string(m.Body) != fmt.Sprint(10+i) {
			t.Fatalf("lo's delivery %d is %q", i, m.Body)
		}
	}
	expectNothing(t, hi, 200*time.Millisecond)
}

// When the active consumer's node dies, the next consumer takes over with
// the dead consumer's unacked messages first: the queue's order holds and
// exactly one consumer receives; on three nodes and on five.
func TestFeatures_SingleActiveConsumerNodeDown(t *testing.T) {
	if os.Getenv("RAFTMQ_E2E_RABBITMQ") != "" {
		t.Skip("kills a raftmq node: raftmq only")
	}
	skipShort(t)
	forShapes(t, everyShape, singleActiveConsumerNodeDown)
}

func singleActiveConsumerNodeDown(t *testing.T, s shape) {
	c := s.start(t)
	pub := channel(t, dial(t, c.Nodes[0]))
	mustDeclare(t, pub, "feat.sac.down", amqp.Table{"x-single-active-consumer": true})
	consume := func(n int, tag string) <-chan amqp.Delivery {
		ch := channel(t, dial(t, c.Nodes[n]))
		if err := ch.Qos(5, 0, false); err != nil {
			t.Fatal(err)
		}
		d, err := ch.Consume("feat.sac.down", tag, false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	a := consume(2, "a")
	b := consume(1, "b")
	publishConfirmed(t, pub, "", "feat.sac.down", numbered(0, 10))
	for i, m := range receive(t, a, 5, 30*time.Second) { // held unacked
		if string(m.Body) != fmt.Sprint(i) {
			t.Fatalf("a's delivery %d is %q", i, m.Body)
		}
	}
	expectNothing(t, b, 200*time.Millisecond)
	c.Kill(2)
	for i := 0; i < 10; i++ {
		m := receive(t, b, 1, 60*time.Second)[0]
		if string(m.Body) != fmt.Sprint(i) || m.Redelivered != (i < 5) {
			t.Fatalf("b's delivery %d is %q (redelivered %v)", i, m.Body, m.Redelivered)
		}
		if err := m.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	if rows := strings.Join(consumerRows(t, c, 0, "feat.sac.down"), ", "); rows != "b true single_active" {
		t.Fatalf("list_consumers after a's node died: %s", rows)
	}
}

// With a prefetch of 10 or more a raftmq node holds deliveries beyond the
// prefetch for its consumer (lookahead); when that consumer cancels, the
// next one still gets the queue in order.
func TestFeatures_SingleActiveConsumerCancelInOrder(t *testing.T) {
	if os.Getenv("RAFTMQ_E2E_RABBITMQ") != "" {
		// Tried: RabbitMQ 3.10.8 delivers nothing to b after the cancel
		// until the queue's next event, and a publish then crashes the
		// classic queue process ({badmatch,false} in
		// rabbit_amqqueue_process:attempt_delivery/4).
		t.Skip("RabbitMQ 3.10.8 mishandles a single active consumer cancelled with unacked messages")
	}
	forShapes(t, twoShapes, singleActiveConsumerCancelInOrder)
}

func singleActiveConsumerCancelInOrder(t *testing.T, s shape) {
	urls, _ := brokersIn(t, s)
	pub := channel(t, dialURL(t, urls[0]))
	freshQueue(t, pub, "feat.sac.order", amqp.Table{"x-single-active-consumer": true})
	consume := func(url, tag string) (*amqp.Channel, <-chan amqp.Delivery) {
		ch := channel(t, dialURL(t, url))
		if err := ch.Qos(10, 0, false); err != nil {
			t.Fatal(err)
		}
		d, err := ch.Consume("feat.sac.order", tag, false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return ch, d
	}
	cha, a := consume(urls[1], "a")
	_, b := consume(urls[2], "b")
	// More than a's lookahead (10 × 11 assignments), so that some stay in
	// the queue behind what a's node holds.
	publishConfirmed(t, pub, "", "feat.sac.order", numbered(0, 150))
	for i, m := range receive(t, a, 10, 30*time.Second) { // its prefetch, unacked
		if string(m.Body) != fmt.Sprint(i) {
			t.Fatalf("a's delivery %d is %q", i, m.Body)
		}
	}
	if err := cha.Cancel("a", false); err != nil {
		t.Fatal(err)
	}
	expectInOrder(t, "b", b, 10, 150, false)
}
