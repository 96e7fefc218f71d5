package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The consumer timeout tests run against raftmq clusters (three nodes
// with one log, five with queue groups) started with a short
// --consumer-timeout, or against the RabbitMQ of
// RAFTMQ_E2E_RABBITMQ, configured with consumer_timeout (rabbitmq.conf)
// set to RAFTMQ_E2E_RABBITMQ_CONSUMER_TIMEOUT ms. RabbitMQ looks at the
// timeout on each channel tick (channel_tick_interval, 60 s by default):
// lower it too, or the test waits for the tick.

// e2eConsumerTimeout is the --consumer-timeout of the raftmq cluster.
const e2eConsumerTimeout = 500 * time.Millisecond

// timeoutBrokers returns an AMQP URL for each node of a raftmq cluster
// of shape s, the index of one whose node does not lead its metadata
// log, and the broker's consumer timeout.
func timeoutBrokers(t *testing.T, s shape) (urls []string, follower int, timeout time.Duration) {
	t.Helper()
	n := s.nodes
	urls = make([]string, n)
	if u := os.Getenv("RAFTMQ_E2E_RABBITMQ"); u != "" {
		ms, err := strconv.Atoi(os.Getenv("RAFTMQ_E2E_RABBITMQ_CONSUMER_TIMEOUT"))
		if err != nil || ms <= 0 {
			t.Skip("set RAFTMQ_E2E_RABBITMQ_CONSUMER_TIMEOUT to the consumer_timeout (ms) RabbitMQ was configured with")
		}
		for i := range urls {
			urls[i] = u
		}
		return urls, 0, time.Duration(ms) * time.Millisecond
	}
	skipShort(t)
	c := s.startWith(t, func(_ int, node *Node) {
		node.Env = append(node.Env, fmt.Sprintf("RAFTMQ_CONSUMER_TIMEOUT=%d", e2eConsumerTimeout.Milliseconds()))
	})
	leader, err := crashLeader(c)
	if err != nil {
		t.Fatal(err)
	}
	for i, node := range c.Nodes {
		urls[i] = node.AMQPURL()
	}
	return urls, (leader + 1) % n, e2eConsumerTimeout
}

// awaitCancel waits for the broker's basic.cancel of consumer tag by its
// consumer timeout and checks that it came no earlier than the timeout
// after since (taken before the publish) and that the channel stayed.
func awaitCancel(t *testing.T, cancels <-chan string, closed <-chan *amqp.Error, since time.Time, timeout time.Duration, tag string) {
	t.Helper()
	select {
	case got := <-cancels:
		if got != tag {
			t.Fatalf("basic.cancel for %q, want %q", got, tag)
		}
		if waited := time.Since(since); waited < timeout {
			t.Fatalf("cancelled %v after the delivery, before the %v timeout", waited, timeout)
		}
	case e := <-closed:
		t.Fatalf("the channel closed: %v", e)
	case <-time.After(timeout + 90*time.Second):
		t.Fatalf("no basic.cancel %v after the delivery", timeout+90*time.Second)
	}
}

// A consumer that never acknowledges is cancelled once the timeout
// passes, as from RabbitMQ 4.3 for a client with consumer_cancel_notify
// (amqp091-go announces it): basic.cancel reaches it, and its message goes
// back to the queue, counted as a return and not a failed attempt. The
// channel and the other consumer on it go on receiving, and the late ack
// of the message taken back is ignored. The message is redelivered to
// another consumer.
func TestFeatures_ConsumerTimeoutCancelsOnlyTheConsumer(t *testing.T) {
	forShapes(t, twoShapes, consumerTimeoutCancelsOnlyTheConsumer)
}

func consumerTimeoutCancelsOnlyTheConsumer(t *testing.T, s shape) {
	urls, f, timeout := timeoutBrokers(t, s)
	other := (f + 1) % len(urls)
	pubConn := dialURL(t, urls[other])
	if os.Getenv("RAFTMQ_E2E_RABBITMQ") != "" {
		if major, minor := serverVersion(pubConn); major < 4 || (major == 4 && minor < 3) {
			t.Skipf("RabbitMQ %v closes the channel; it cancels the consumer from 4.3 on", pubConn.Properties["version"])
		}
	}
	pub := channel(t, pubConn)
	// RabbitMQ 4.3 times out the consumers of quorum queues only.
	quorum := amqp.Table{"x-queue-type": "quorum"}
	freshQueue(t, pub, "feat.ctimeout", quorum)
	freshQueue(t, pub, "feat.ctimeout.busy", quorum)

	conn := dialURL(t, urls[f])
	ch := channel(t, conn)
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	cancels := ch.NotifyCancel(make(chan string, 2))
	if err := ch.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	stuck, err := ch.Consume("feat.ctimeout", "stuck", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	busy, err := ch.Consume("feat.ctimeout.busy", "busy", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	since := time.Now() // the delivery is assigned after it
	publishConfirmed(t, pub, "", "feat.ctimeout", []amqp.Publishing{{Body: []byte("m1")}})
	held := receive(t, stuck, 1, 30*time.Second)[0]
	if string(held.Body) != "m1" || held.Redelivered {
		t.Fatalf("first delivery %q redelivered %v", held.Body, held.Redelivered)
	}

	// The other consumer of the channel works on while the first waits.
	after := make(chan amqp.Delivery, 1)
	go func() {
		for m := range busy {
			_ = m.Ack(false)
			if string(m.Body) == "after" {
				after <- m
				return
			}
		}
	}()
	for i := 0; i < 3; i++ {
		publishConfirmed(t, pub, "", "feat.ctimeout.busy", []amqp.Publishing{{Body: []byte(fmt.Sprintf("b%d", i))}})
	}
	awaitCancel(t, cancels, closed, since, timeout, "stuck")
	// amqp091-go ends the cancelled consumer's deliveries.
	if _, ok := <-stuck; ok {
		t.Fatal("the cancelled consumer got another delivery")
	}
	if err := held.Ack(false); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, pub, "", "feat.ctimeout.busy", []amqp.Publishing{{Body: []byte("after")}})
	select {
	case <-after:
	case <-time.After(30 * time.Second):
		t.Fatal("after the timeout the channel's other consumer did not get its message")
	}
	if _, err := ch.QueueDeclarePassive("feat.ctimeout", true, false, false, false, quorum); err != nil {
		t.Fatalf("the channel after the timeout and a late ack: %v", err)
	}
	select {
	case e := <-closed:
		t.Fatalf("the channel closed: %v", e)
	default:
	}

	cons := channel(t, dialURL(t, urls[other]))
	d2, err := cons.Consume("feat.ctimeout", "taker", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := receive(t, d2, 1, 30*time.Second)[0]
	if string(m.Body) != "m1" || !m.Redelivered {
		t.Fatalf("the other consumer got %q redelivered %v, want m1 redelivered", m.Body, m.Redelivered)
	}
	// RabbitMQ 4.3 counts a consumer timeout as a return, not a failed
	// delivery attempt.
	if m.Headers["x-acquired-count"] != int64(1) || m.Headers["x-delivery-count"] != nil {
		t.Fatalf("headers %v, want x-acquired-count 1 and no x-delivery-count", m.Headers)
	}
	if err := m.Ack(false); err != nil {
		t.Fatal(err)
	}
	expectNothing(t, d2, 300*time.Millisecond)
}

// pika drives the same through a client with consumer_cancel_notify (the
// channel's other consumer goes on) and one that leaves the capability
// out: its channel is closed with 406, as before RabbitMQ 4.3.
func TestFeatures_ConsumerTimeoutPika(t *testing.T) {
	py := pythonWithPika(t)
	forShapes(t, twoShapes, func(t *testing.T, s shape) {
		urls, f, timeout := timeoutBrokers(t, s)
		runPika(t, "pika_timeout.py", py, urls[f], urls[(f+1)%len(urls)], strconv.FormatInt(timeout.Milliseconds(), 10))
	})
}

// serverVersion is the broker's version from connection.start, as major
// and minor.
func serverVersion(conn *amqp.Connection) (major, minor int) {
	v, _ := conn.Properties["version"].(string)
	parts := strings.Split(v, ".")
	if len(parts) >= 2 {
		major, _ = strconv.Atoi(parts[0])
		minor, _ = strconv.Atoi(parts[1])
	}
	return major, minor
}

// x-consumer-timeout (RabbitMQ 3.12) sets a queue's own timeout, smaller
// or larger than the broker's, and a negative one is refused.
func TestFeatures_ConsumerTimeoutQueueArgument(t *testing.T) {
	forShapes(t, twoShapes, consumerTimeoutQueueArgument)
}

func consumerTimeoutQueueArgument(t *testing.T, s shape) {
	urls, f, _ := timeoutBrokers(t, s)
	conn := dialURL(t, urls[f])
	if os.Getenv("RAFTMQ_E2E_RABBITMQ") != "" {
		if major, minor := serverVersion(conn); major < 4 || (major == 4 && minor < 3) {
			t.Skipf("RabbitMQ %v closes the channel; it cancels the consumer from 4.3 on", conn.Properties["version"])
		}
	}
	pub := channel(t, conn)
	const own = 300 * time.Millisecond
	freshQueue(t, pub, "feat.ctimeout.arg", amqp.Table{"x-queue-type": "quorum", "x-consumer-timeout": int64(own.Milliseconds())})

	bad := channel(t, conn)
	closed := bad.NotifyClose(make(chan *amqp.Error, 1))
	_, err := bad.QueueDeclare("feat.ctimeout.bad", false, false, false, false, amqp.Table{"x-consumer-timeout": int64(-1)})
	if e, ok := err.(*amqp.Error); !ok || e.Code != 406 || !strings.Contains(e.Reason, "x-consumer-timeout") {
		t.Fatalf("a negative x-consumer-timeout: %v", err)
	}
	<-closed // closed by the refusal

	stuck := channel(t, dialURL(t, urls[f]))
	stuckClosed := stuck.NotifyClose(make(chan *amqp.Error, 1))
	stuckCancels := stuck.NotifyCancel(make(chan string, 1))
	ds, err := stuck.Consume("feat.ctimeout.arg", "stuck", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	since := time.Now()
	publishConfirmed(t, pub, "", "feat.ctimeout.arg", []amqp.Publishing{{Body: []byte("m1")}})
	receive(t, ds, 1, 30*time.Second)
	awaitCancel(t, stuckCancels, stuckClosed, since, own, "stuck")
}
