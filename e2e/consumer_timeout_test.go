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

// The consumer timeout tests run against a three-node raftmq cluster
// started with a short --consumer-timeout, or against the RabbitMQ of
// RAFTMQ_E2E_RABBITMQ, configured with consumer_timeout (rabbitmq.conf)
// set to RAFTMQ_E2E_RABBITMQ_CONSUMER_TIMEOUT ms. RabbitMQ looks at the
// timeout on each channel tick (channel_tick_interval, 60 s by default):
// lower it too, or the test waits for the tick.

// e2eConsumerTimeout is the --consumer-timeout of the raftmq cluster.
const e2eConsumerTimeout = 500 * time.Millisecond

// timeoutBrokers returns n AMQP URLs, the index of one whose node is not
// the raftmq cluster's leader, and the broker's consumer timeout.
func timeoutBrokers(t *testing.T, n int) (urls []string, follower int, timeout time.Duration) {
	t.Helper()
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
	c := StartClusterWith(t, n, func(_ int, node *Node) {
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

func timeoutText(channel int, timeout time.Duration) string {
	return fmt.Sprintf("PRECONDITION_FAILED - delivery acknowledgement on channel %d timed out. Timeout value used: %d ms. "+
		"This timeout value can be configured, see consumers doc guide to learn more", channel, timeout.Milliseconds())
}

// awaitTimeout waits for the channel's close by the broker's consumer
// timeout and checks its code, text and that it came no earlier than the
// timeout after since (taken before the publish).
func awaitTimeout(t *testing.T, closed <-chan *amqp.Error, since time.Time, timeout time.Duration, channel int) {
	t.Helper()
	select {
	case e := <-closed:
		if e == nil || e.Code != 406 || !e.Server || e.Reason != timeoutText(channel, timeout) {
			t.Fatalf("channel closed with %v, want 406 %q", e, timeoutText(channel, timeout))
		}
		if waited := time.Since(since); waited < timeout {
			t.Fatalf("closed %v after the delivery, before the %v timeout", waited, timeout)
		}
	case <-time.After(timeout + 90*time.Second):
		t.Fatalf("the channel was not closed %v after the delivery", timeout+90*time.Second)
	}
}

// A consumer that never acknowledges has its channel closed with 406 once
// the timeout passes, its connection stays, and the message is redelivered
// to another consumer.
func TestFeatures_ConsumerTimeoutClosesTheChannel(t *testing.T) {
	urls, f, timeout := timeoutBrokers(t, 3)
	other := (f + 1) % len(urls)
	pub := channel(t, dialURL(t, urls[other]))
	freshQueue(t, pub, "feat.ctimeout", nil)

	stuckConn := dialURL(t, urls[f])
	stuck := channel(t, stuckConn)
	closed := stuck.NotifyClose(make(chan *amqp.Error, 1))
	connClosed := stuckConn.NotifyClose(make(chan *amqp.Error, 1))
	if err := stuck.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := stuck.Consume("feat.ctimeout", "stuck", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	since := time.Now() // the delivery is assigned after it
	publishConfirmed(t, pub, "", "feat.ctimeout", []amqp.Publishing{{Body: []byte("m1")}})
	got := receive(t, ds, 1, 30*time.Second)[0]
	if string(got.Body) != "m1" || got.Redelivered {
		t.Fatalf("first delivery %q redelivered %v", got.Body, got.Redelivered)
	}
	awaitTimeout(t, closed, since, timeout, 1)

	// Only the channel went: the connection opens another.
	again, err := stuckConn.Channel()
	if err != nil {
		t.Fatalf("the connection did not survive: %v", err)
	}
	if _, err := again.QueueDeclarePassive("feat.ctimeout", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-connClosed:
		t.Fatalf("the connection closed: %v", e)
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
	if err := m.Ack(false); err != nil {
		t.Fatal(err)
	}
	expectNothing(t, d2, 300*time.Millisecond)
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
	urls, f, _ := timeoutBrokers(t, 3)
	conn := dialURL(t, urls[f])
	if os.Getenv("RAFTMQ_E2E_RABBITMQ") != "" {
		if major, minor := serverVersion(conn); major < 3 || (major == 3 && minor < 12) {
			t.Skipf("RabbitMQ %v takes x-consumer-timeout from 3.12 on", conn.Properties["version"])
		}
	}
	pub := channel(t, conn)
	const own = 300 * time.Millisecond
	freshQueue(t, pub, "feat.ctimeout.arg", amqp.Table{"x-consumer-timeout": int64(own.Milliseconds())})

	bad := channel(t, conn)
	closed := bad.NotifyClose(make(chan *amqp.Error, 1))
	_, err := bad.QueueDeclare("feat.ctimeout.bad", false, false, false, false, amqp.Table{"x-consumer-timeout": int64(-1)})
	if e, ok := err.(*amqp.Error); !ok || e.Code != 406 || !strings.Contains(e.Reason, "x-consumer-timeout") {
		t.Fatalf("a negative x-consumer-timeout: %v", err)
	}
	<-closed // closed by the refusal

	stuck := channel(t, dialURL(t, urls[f]))
	stuckClosed := stuck.NotifyClose(make(chan *amqp.Error, 1))
	ds, err := stuck.Consume("feat.ctimeout.arg", "stuck", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	since := time.Now()
	publishConfirmed(t, pub, "", "feat.ctimeout.arg", []amqp.Publishing{{Body: []byte("m1")}})
	receive(t, ds, 1, 30*time.Second)
	awaitTimeout(t, stuckClosed, since, own, 1)
}
