package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// defaultLargeMax is the --max-message-size of the large-message test:
// above the 64 MiB record raft-wal reads back, which a publish of this
// size made every node of a cluster unable to start again. Set
// RAFTMQ_E2E_LARGE_MAX (bytes, up to 134217728) to run it at another
// size; the largest takes several GiB of memory across the processes.
const defaultLargeMax = 72 << 20

func largeMaxSize(t *testing.T) int {
	v := os.Getenv("RAFTMQ_E2E_LARGE_MAX")
	if v == "" {
		return defaultLargeMax
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 2 {
		t.Fatalf("RAFTMQ_E2E_LARGE_MAX=%q: want a size in bytes", v)
	}
	return n
}

// largeBody is message id's body of n bytes: regenerated to compare, so
// the test holds few of them at once.
func largeBody(n int, id byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = id ^ byte(i) ^ byte(i>>9)
	}
	return b
}

type largeMsg struct {
	id   string
	size int
}

// TestLargeMessages_AtTheLimitSurviveStopsAndKills publishes confirmed
// messages of --max-message-size and one byte under, checks that one byte
// over is refused as RabbitMQ refuses it, and gets every confirmed body
// back byte for byte after every node was stopped with SIGTERM and
// started, and again after every node was killed with SIGKILL right
// after a confirm.
func TestLargeMessages_AtTheLimitSurviveStopsAndKills(t *testing.T) {
	skipShort(t)
	largeMax := largeMaxSize(t)
	c := StartClusterWith(t, 3, func(_ int, n *Node) {
		n.ExtraArgs = append(n.ExtraArgs, "--max-message-size", strconv.Itoa(largeMax))
	})
	const q = "large-q"
	ch := channel(t, dial(t, c.Nodes[1]))
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	msgs := []largeMsg{{"at", largeMax}, {"under", largeMax - 1}}
	for i, m := range msgs {
		publishLarge(t, c, 1, q, m.id, largeBody(m.size, byte(i+1)))
	}

	// One byte over: the channel is closed with 406, the connection stays.
	over := channel(t, dial(t, c.Nodes[2]))
	closed := over.NotifyClose(make(chan *amqp.Error, 1))
	_ = over.PublishWithContext(context.Background(), "", q, false, false, amqp.Publishing{Body: largeBody(largeMax+1, 9)})
	want := fmt.Sprintf("PRECONDITION_FAILED - message size %d is larger than configured max size %d", largeMax+1, largeMax)
	select {
	case err := <-closed:
		if err == nil || err.Code != amqp.PreconditionFailed || err.Reason != want {
			t.Fatalf("publish of max+1 bytes: channel closed with %v; want 406 %q", err, want)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("publish of max+1 bytes: the channel was not closed")
	}

	checkLarge(t, c, 0, q, msgs, false)

	for i := range c.Nodes {
		c.Stop(i)
	}
	startAll(t, c)
	checkLarge(t, c, 2, q, msgs, false)

	// A third message confirmed, then every node killed at once.
	msgs = append(msgs, largeMsg{"at-before-kill", largeMax})
	publishLarge(t, c, 0, q, "at-before-kill", largeBody(largeMax, 3))
	for i := range c.Nodes {
		c.Kill(i)
	}
	startAll(t, c)
	checkLarge(t, c, 1, q, msgs, true)
}

func startAll(t *testing.T, c *Cluster) {
	t.Helper()
	for i := range c.Nodes {
		c.Start(i)
	}
	for i := range c.Nodes {
		c.WaitReady(i, 2*time.Minute)
	}
}

// checkLarge gets every message of q on node i and compares each body
// byte for byte with the one published under its id: every confirmed
// message is there, nothing else is (a republished one may be there
// twice). Without ack they are requeued when the channel closes.
//
// A client whose connection the server closes connects again, as real
// ones do; what it held goes back to the queue and is got again. The
// server's reason is logged, and a third loss fails the check.
func checkLarge(t *testing.T, c *Cluster, i int, q string, msgs []largeMsg, ack bool) {
	t.Helper()
	seen := map[string]int{}
	conn, ch, closed := largeChannel(t, c, i)
	for lost := 0; ; {
		var d amqp.Delivery
		var ok bool
		err := Eventually(30*time.Second, func() error {
			var err error
			d, ok, err = ch.Get(q, false)
			if err == nil && !ok && len(seen) < len(msgs) {
				return errors.New("queue empty")
			}
			return err
		}, amqp.ErrClosed)
		if errors.Is(err, amqp.ErrClosed) && lost < 2 {
			// A closed channel answers every later call with 504: what
			// closed it is the server's exception.
			lost++
			t.Logf("%s: get from %s after %v: the channel closed with %v; connecting again", c.Nodes[i].ID, q, seen, <-closed)
			_ = conn.Close()
			conn, ch, closed = largeChannel(t, c, i)
			continue
		}
		if err != nil {
			var why *amqp.Error
			select {
			case why = <-closed:
			default:
			}
			t.Fatalf("%s: get from %s after %v: %v (the channel closed with %v)", c.Nodes[i].ID, q, seen, err, why)
		}
		if !ok {
			break
		}
		k := slices.IndexFunc(msgs, func(m largeMsg) bool { return m.id == d.MessageId })
		if k < 0 || !bytes.Equal(d.Body, largeBody(msgs[k].size, byte(k+1))) {
			t.Fatalf("%s: message %q with %d bytes is none of those published", c.Nodes[i].ID, d.MessageId, len(d.Body))
		}
		seen[d.MessageId]++
		d.Body = nil
		if ack {
			// An ack's failure closes the channel: the next get says so.
			_ = d.Ack(false)
		}
	}
	for _, m := range msgs {
		if seen[m.id] == 0 {
			t.Fatalf("%s: confirmed message %q not in %s (got %v)", c.Nodes[i].ID, m.id, q, seen)
		}
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
}

// largeChannel is a new connection to node i and a channel on it, with
// the channel's close notification.
func largeChannel(t *testing.T, c *Cluster, i int) (*amqp.Connection, *amqp.Channel, chan *amqp.Error) {
	t.Helper()
	conn := dial(t, c.Nodes[i])
	ch := channel(t, conn)
	return conn, ch, ch.NotifyClose(make(chan *amqp.Error, 1))
}

// publishLarge publishes one persistent message through node i until it
// is confirmed. A nack (an outcome a leadership change left unknown) is
// answered as a publisher does, by publishing again: the message may then
// be queued twice. A connection the server closes (a node that lost
// contact with the majority closes its clients and asks them to reconnect
// to another node: a 72 MiB append on a loaded machine can do that) is
// answered as a client does, by connecting to the next node and
// publishing again. The nodes' logs are dumped while they still exist if
// it is never confirmed.
func publishLarge(t *testing.T, c *Cluster, i int, q, id string, body []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conn, ch, closed := largeChannel(t, c, i)
	defer func() { _ = conn.Close() }()
	if err := ch.Confirm(false); err != nil {
		t.Fatalf("confirm.select: %v", err)
	}
	for attempt, lost := 1, 0; ; attempt++ {
		if attempt > 5 {
			c.DumpLogs()
			t.Fatalf("%s not confirmed in %d attempts", id, attempt-1)
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, amqp.Publishing{MessageId: id, DeliveryMode: amqp.Persistent, Body: body})
		ok := false
		if err == nil {
			ok, err = dc.WaitContext(ctx)
		}
		if ok && err == nil {
			return
		}
		if err == nil {
			t.Logf("%s nacked (attempt %d), publishing it again", id, attempt)
			continue
		}
		var why *amqp.Error
		select {
		case why = <-closed:
		default:
		}
		if why == nil || why.Code != amqp.ConnectionForced || lost == 2 {
			c.DumpLogs()
			t.Fatalf("publish %s (attempt %d): %v (the channel closed with %v)", id, attempt, err, why)
		}
		lost++
		i = (i + 1) % len(c.Nodes)
		t.Logf("%s (attempt %d): the server closed the connection with %v; connecting to %s", id, attempt, why, c.Nodes[i].ID)
		_ = conn.Close()
		conn, ch, closed = largeChannel(t, c, i)
		if err := ch.Confirm(false); err != nil {
			t.Fatalf("confirm.select: %v", err)
		}
	}
}
