package e2e

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// These tests start real raftmq processes on loopback and drive them with
// amqp091-go, as a user would.

func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts real raftmq processes; skipped with -short")
	}
}

func dial(t *testing.T, n *Node) *amqp.Connection {
	t.Helper()
	var conn *amqp.Connection
	err := Eventually(20*time.Second, func() error {
		c, err := amqp.Dial(n.AMQPURL())
		if err != nil {
			return err
		}
		conn = c
		return nil
	})
	if err != nil {
		t.Fatalf("dial %s: %v", n.ID, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func channel(t *testing.T, conn *amqp.Connection) *amqp.Channel {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("open channel: %v", err)
	}
	return ch
}

func mustDeclare(t *testing.T, ch *amqp.Channel, name string, args amqp.Table) {
	t.Helper()
	if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		t.Fatalf("declare %s: %v", name, err)
	}
}

// declareDeadLetters declares a durable fanout exchange dlx with the
// durable queue dead bound to it, and the durable queue src whose
// messages die after ttl into dlx.
func declareDeadLetters(t *testing.T, ch *amqp.Channel, src string, ttl time.Duration, dlx, dead string) {
	t.Helper()
	if err := ch.ExchangeDeclare(dlx, "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	mustDeclare(t, ch, dead, nil)
	if err := ch.QueueBind(dead, "", dlx, false, nil); err != nil {
		t.Fatal(err)
	}
	mustDeclare(t, ch, src, amqp.Table{"x-message-ttl": int32(ttl / time.Millisecond), "x-dead-letter-exchange": dlx})
}

// publishConfirmed publishes msgs with confirms and fails unless every one
// is acked by the broker.
func publishConfirmed(t *testing.T, ch *amqp.Channel, exchange, key string, msgs []amqp.Publishing) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatalf("confirm.select: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var confs []*amqp.DeferredConfirmation
	for i, m := range msgs {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, false, false, m)
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		confs = append(confs, dc)
	}
	for i, dc := range confs {
		ok, err := dc.WaitContext(ctx)
		if err != nil || !ok {
			t.Fatalf("confirm of message %d: ok=%v err=%v", i, ok, err)
		}
	}
}

// receive collects n deliveries from ch or fails after timeout.
func receive(t *testing.T, deliveries <-chan amqp.Delivery, n int, timeout time.Duration) []amqp.Delivery {
	t.Helper()
	var got []amqp.Delivery
	deadline := time.After(timeout)
	for len(got) < n {
		select {
		case d, ok := <-deliveries:
			if !ok {
				t.Fatalf("delivery channel closed after %d of %d", len(got), n)
			}
			got = append(got, d)
		case <-deadline:
			t.Fatalf("received %d of %d messages in %v", len(got), n, timeout)
		}
	}
	return got
}

// expectNothing fails if a delivery arrives within d.
func expectNothing(t *testing.T, deliveries <-chan amqp.Delivery, d time.Duration) {
	t.Helper()
	select {
	case m := <-deliveries:
		t.Fatalf("unexpected delivery %q", m.Body)
	case <-time.After(d):
	}
}

// A fanout's copies reach a queue consumed on each other node, in order
// and each once; with queue groups the two queues may live in different
// groups, and a confirm comes once each has taken its copy.
func TestCluster_PublishOnOneNodeConsumeOnOthers(t *testing.T) {
	skipShort(t)
	forShapes(t, twoShapes, publishOnOneNodeConsumeOnOthers)
}

func publishOnOneNodeConsumeOnOthers(t *testing.T, s shape) {
	c := s.start(t)
	pub := channel(t, dial(t, c.Nodes[0]))
	if err := pub.ExchangeDeclare("fan", "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"q2", "q3"} {
		mustDeclare(t, pub, q, nil)
		if err := pub.QueueBind(q, "", "fan", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	var consumers []<-chan amqp.Delivery
	for i, q := range []string{"q2", "q3"} {
		ch := channel(t, dial(t, c.Nodes[i+1]))
		if err := ch.Qos(50, 0, false); err != nil {
			t.Fatal(err)
		}
		d, err := ch.Consume(q, "", false, false, false, false, nil)
		if err != nil {
			t.Fatalf("consume %s on %s: %v", q, c.Nodes[i+1].ID, err)
		}
		consumers = append(consumers, d)
	}
	const n = 500
	msgs := make([]amqp.Publishing, n)
	for i := range msgs {
		msgs[i] = amqp.Publishing{Body: []byte(fmt.Sprint(i)), DeliveryMode: amqp.Persistent}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		publishConfirmed(t, pub, "fan", "", msgs)
	}()
	for ci, d := range consumers {
		// Ack as they come: prefetch 50 holds back the rest until then.
		for i := 0; i < n; i++ {
			m := receive(t, d, 1, 60*time.Second)[0]
			if string(m.Body) != fmt.Sprint(i) || m.Redelivered {
				t.Fatalf("consumer %d: message %d is %q (redelivered %v): order or exactly-once broken", ci, i, m.Body, m.Redelivered)
			}
			if err := m.Ack(false); err != nil {
				t.Fatal(err)
			}
		}
		expectNothing(t, d, 300*time.Millisecond)
	}
	wg.Wait()
}

// The TTL rules of the seeds, with the declaring, publishing and
// consuming clients each on another node, on three nodes and on five
// (where the last two nodes joined the three a quorum needs).
func TestCluster_TTLRulesAcrossNodes(t *testing.T) {
	skipShort(t)
	forShapes(t, everyShape, ttlRulesAcrossNodes)
}

func ttlRulesAcrossNodes(t *testing.T, s shape) {
	c := s.start(t)
	size := s.nodes
	admin := channel(t, dial(t, c.Nodes[0]))
	pub := channel(t, dial(t, c.Nodes[size-2]))
	obs := channel(t, dial(t, c.Nodes[size-1]))

	if err := admin.ExchangeDeclare("dlx", "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	mustDeclare(t, admin, "dead", nil)
	if err := admin.QueueBind("dead", "dead", "dlx", false, nil); err != nil {
		t.Fatal(err)
	}
	dead, err := obs.Consume("dead", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	dl := amqp.Table{"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dead"}
	withTTL := func(ttl int32) amqp.Table {
		t := amqp.Table{}
		for k, v := range dl {
			t[k] = v
		}
		t["x-message-ttl"] = ttl
		return t
	}

	t.Run("queue TTL dead-letters with x-death", func(t *testing.T) {
		// seeds/000: "A message that has been in the queue for longer than
		// the configured TTL is said to be dead."
		mustDeclare(t, admin, "ttl-q", withTTL(400))
		start := time.Now()
		publishConfirmed(t, pub, "", "ttl-q", []amqp.Publishing{{Body: []byte("a")}})
		m := receive(t, dead, 1, 10*time.Second)[0]
		if el := elapsed(start); el < 400*time.Millisecond {
			t.Fatalf("dead-lettered after %v, before its 400 ms TTL", el)
		}
		xd, ok := m.Headers["x-death"].([]interface{})
		if !ok || len(xd) != 1 {
			t.Fatalf("x-death = %#v", m.Headers["x-death"])
		}
		e := xd[0].(amqp.Table)
		if e["reason"] != "expired" || e["queue"] != "ttl-q" || e["exchange"] != "" || e["count"] != int64(1) {
			t.Fatalf("x-death entry = %#v", e)
		}
		if m.Headers["x-first-death-reason"] != "expired" || m.Headers["x-first-death-queue"] != "ttl-q" {
			t.Fatalf("x-first-death headers = %#v", m.Headers)
		}
	})

	t.Run("per-message expiration lower than the queue's wins", func(t *testing.T) {
		// seeds/000: "When both a per-queue and a per-message TTL are
		// specified, the lower value between the two will be chosen."
		mustDeclare(t, admin, "ttl-lower", withTTL(60000))
		start := time.Now()
		publishConfirmed(t, pub, "", "ttl-lower", []amqp.Publishing{{Body: []byte("b"), Expiration: "300"}})
		m := receive(t, dead, 1, 10*time.Second)[0]
		if el := time.Since(start); el > 5*time.Second {
			t.Fatalf("died after %v: the queue's 60 s TTL won over the message's 300 ms", el)
		}
		e := m.Headers["x-death"].([]interface{})[0].(amqp.Table)
		if e["original-expiration"] != "300" {
			t.Fatalf("original-expiration = %#v", e["original-expiration"])
		}
		if m.Expiration != "" {
			t.Fatalf("dead-lettered message kept expiration %q", m.Expiration)
		}
	})

	t.Run("a short TTL behind a long one dies on time", func(t *testing.T) {
		mustDeclare(t, admin, "ttl-exact", dl)
		start := time.Now()
		publishConfirmed(t, pub, "", "ttl-exact", []amqp.Publishing{
			{Body: []byte("long"), Expiration: "60000"},
			{Body: []byte("short"), Expiration: "300"},
		})
		m := receive(t, dead, 1, 10*time.Second)[0]
		if string(m.Body) != "short" {
			t.Fatalf("dead-lettered %q first", m.Body)
		}
		if el := time.Since(start); el > 3*time.Second {
			t.Fatalf("short-TTL message died after %v, held back by the long one at the head", el)
		}
		q, err := admin.QueueDeclarePassive("ttl-exact", true, false, false, false, dl)
		if err != nil {
			t.Fatal(err)
		}
		if q.Messages != 1 {
			t.Fatalf("queue depth %d after the short message died, want 1", q.Messages)
		}
	})

	t.Run("TTL 0 without a consumer dies at once", func(t *testing.T) {
		// seeds/000: "Setting the TTL to 0 causes messages to be expired upon
		// reaching a queue unless they can be delivered to a consumer
		// immediately."
		mustDeclare(t, admin, "ttl-zero", withTTL(0))
		publishConfirmed(t, pub, "", "ttl-zero", []amqp.Publishing{{Body: []byte("z")}})
		m := receive(t, dead, 1, 10*time.Second)[0]
		if string(m.Body) != "z" {
			t.Fatalf("got %q", m.Body)
		}
	})

	t.Run("requeue keeps the original expiry", func(t *testing.T) {
		// seeds/000: "The original expiry time of a message is preserved if
		// it is requeued."
		mustDeclare(t, admin, "ttl-requeue", withTTL(1500))
		cons := channel(t, dial(t, c.Nodes[2]))
		start := time.Now()
		publishConfirmed(t, pub, "", "ttl-requeue", []amqp.Publishing{{Body: []byte("r")}})
		m, ok, err := cons.Get("ttl-requeue", false)
		if err != nil || !ok {
			t.Fatalf("get: ok=%v err=%v", ok, err)
		}
		if err := m.Nack(false, true); err != nil {
			t.Fatal(err)
		}
		d := receive(t, dead, 1, 10*time.Second)[0]
		el := time.Since(start)
		if string(d.Body) != "r" || el < 1500*time.Millisecond || el > 4*time.Second {
			t.Fatalf("requeued message died after %v (body %q), want about 1.5 s", el, d.Body)
		}
	})

	t.Run("x-expires deletes an unused queue", func(t *testing.T) {
		// seeds/000: "This controls for how long a queue can be unused before
		// it is automatically deleted."
		mustDeclare(t, admin, "lease", amqp.Table{"x-expires": int32(500)})
		// Polling with queue.declare would renew the lease, so the probe is a
		// mandatory publish to the queue's name: it comes back as basic.return
		// once the queue is gone, and publishing does not count as use.
		probe := channel(t, dial(t, c.Nodes[2]))
		returns := probe.NotifyReturn(make(chan amqp.Return, 16))
		start := time.Now()
		err := Eventually(10*time.Second, func() error {
			err := probe.PublishWithContext(context.Background(), "", "lease", true, false, amqp.Publishing{Body: []byte("?")})
			if err != nil {
				return err
			}
			select {
			case <-returns:
				return nil
			case <-time.After(100 * time.Millisecond):
				return errors.New("queue still routable")
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if el := elapsed(start); el < 400*time.Millisecond {
			t.Fatalf("queue deleted after %v, before its 500 ms lease", el)
		}
	})
}

// The messages a consumer held unacked when its node was killed go to
// another consumer, flagged redelivered.
func TestCluster_KilledConsumerNodeRedelivers(t *testing.T) {
	skipShort(t)
	forShapes(t, twoShapes, killedConsumerNodeRedelivers)
}

func killedConsumerNodeRedelivers(t *testing.T, s shape) {
	c := s.start(t)
	pub := channel(t, dial(t, c.Nodes[0]))
	mustDeclare(t, pub, "work", nil)
	victim := channel(t, dial(t, c.Nodes[2]))
	d, err := victim.Consume("work", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, pub, "", "work", []amqp.Publishing{{Body: []byte("1")}, {Body: []byte("2")}})
	receive(t, d, 2, 20*time.Second) // held unacked
	c.Kill(2)

	ch := channel(t, dial(t, c.Nodes[1]))
	d2, err := ch.Consume("work", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := receive(t, d2, 2, 60*time.Second)
	for i, m := range got {
		if string(m.Body) != fmt.Sprint(i+1) || !m.Redelivered {
			t.Fatalf("message %d: body %q redelivered=%v", i, m.Body, m.Redelivered)
		}
		if err := m.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
}
