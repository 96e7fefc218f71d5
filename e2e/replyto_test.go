package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

const replyQueue = "amq.rabbitmq.reply-to"

// rpcResponder answers every request of queue on ch with "re:" and the
// request's body, to the request's reply_to, and acks the request.
func rpcResponder(t *testing.T, ch *amqp.Channel, queue string) {
	t.Helper()
	reqs, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatalf("responder: %v", err)
	}
	go func() {
		for d := range reqs {
			_ = ch.Publish("", d.ReplyTo, false, false, amqp.Publishing{CorrelationId: d.CorrelationId, Body: append([]byte("re:"), d.Body...)})
			_ = d.Ack(false)
		}
	}()
}

// replyOutcome publishes one mandatory reply to name on a confirming
// channel and reports whether it came back as returned (312) and was
// confirmed: replies are confirmed whatever became of them.
func replyOutcome(t *testing.T, ch *amqp.Channel, confirms <-chan amqp.Confirmation, returns <-chan amqp.Return, name string, body []byte) (returned bool) {
	t.Helper()
	if err := ch.Publish("", name, true, false, amqp.Publishing{Body: body}); err != nil {
		t.Fatalf("reply to %q: %v", name, err)
	}
	select {
	case c := <-confirms:
		if !c.Ack {
			t.Fatalf("reply to %q nacked", name)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("reply to %q not confirmed", name)
	}
	// The return precedes the confirm of the same message.
	select {
	case r := <-returns:
		if r.ReplyCode != 312 || r.RoutingKey != name {
			t.Fatalf("return %d %q for %q", r.ReplyCode, r.RoutingKey, name)
		}
		return true
	default:
		return false
	}
}

// TestFeatures_DirectReplyToAcrossNodes: a requester on one node, a
// responder on another, an observer (and adversary) on the third.
func TestFeatures_DirectReplyToAcrossNodes(t *testing.T) {
	forShapes(t, twoShapes, directReplyToAcrossNodes)
}

func directReplyToAcrossNodes(t *testing.T, s shape) {
	urls, c := brokersIn(t, s)
	obsConn := dialURL(t, urls[2])
	obs := channel(t, obsConn)
	freshQueue(t, obs, "feat.rpc", nil)

	respConn := dialURL(t, urls[1])
	rpcResponder(t, channel(t, respConn), "feat.rpc")

	reqConn := dialURL(t, urls[0])
	req := channel(t, reqConn)
	replies, err := req.Consume(replyQueue, "rpc-client", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if err := req.Publish("", "feat.rpc", false, false, amqp.Publishing{ReplyTo: replyQueue, CorrelationId: fmt.Sprint(i), Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]bool{}
	var name string
	for _, d := range receive(t, replies, 20, 30*time.Second) {
		if string(d.Body) != "re:"+d.CorrelationId || d.ConsumerTag != "rpc-client" || d.Exchange != "" || !strings.HasPrefix(d.RoutingKey, replyQueue+".") {
			t.Fatalf("reply %q (correlation %s) for %s from %q %q", d.Body, d.CorrelationId, d.ConsumerTag, d.Exchange, d.RoutingKey)
		}
		if name != "" && d.RoutingKey != name {
			t.Fatalf("replies to %q and %q", name, d.RoutingKey)
		}
		name = d.RoutingKey
		got[d.CorrelationId] = true
	}
	if len(got) != 20 {
		t.Fatalf("%d distinct replies", len(got))
	}

	// The observer sees the name as a queue with one consumer while the
	// requester is there; the pseudo-queue itself always.
	for _, q := range []string{name, replyQueue} {
		if info, err := obs.QueueDeclarePassive(q, false, false, false, false, nil); err != nil || info.Consumers != 1 || info.Messages != 0 {
			t.Fatalf("passive declare of %q: %+v, %v", q, info, err)
		}
	}

	// Adversary replies from the observer's node: names that are not the
	// requester's are dropped (the good reply after each arrives first),
	// confirmed, and, mandatory, returned as unroutable, as every reply
	// is (RabbitMQ 3.x treats the name as no queue).
	if err := obs.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := obs.NotifyPublish(make(chan amqp.Confirmation, 8))
	returns := obs.NotifyReturn(make(chan amqp.Return, 8))
	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	forged := []string{
		flip(name, len(name)-1),
		replyQueue + ".garbage",
		name[:len(name)-4],
	}
	if c != nil {
		// raftmq's key leads the suffix. RabbitMQ 3.10 has the channel's
		// pid there, and a name whose pid does not decode crashes the
		// publisher's channel (a case_clause in pid_recomposition).
		forged = append(forged, flip(name, len(replyQueue)+3))
	}
	for _, bad := range forged {
		if !replyOutcome(t, obs, confirms, returns, bad, []byte("forged")) {
			t.Fatalf("mandatory reply to %q not returned", bad)
		}
		if !replyOutcome(t, obs, confirms, returns, name, []byte("good")) {
			t.Fatalf("mandatory reply to %q not returned", name)
		}
		if d := receive(t, replies, 1, 30*time.Second)[0]; string(d.Body) != "good" {
			t.Fatalf("after a reply to %q the requester got %q", bad, d.Body)
		}
		if _, err := channel(t, obsConn).QueueDeclarePassive(bad, false, false, false, false, nil); !isCode(err, 404) {
			t.Fatalf("passive declare of %q: %v", bad, err)
		}
	}
	// A large reply crosses nodes whole (above gRPC's default 4 MiB).
	big := bytes.Repeat([]byte("0123456789abcdef"), 6<<20/16)
	replyOutcome(t, obs, confirms, returns, name, big)
	if d := receive(t, replies, 1, 60*time.Second)[0]; !bytes.Equal(d.Body, big) {
		t.Fatalf("large reply of %d bytes arrived with %d", len(big), len(d.Body))
	}

	// Cancelled, the reply consumer's name is gone.
	if err := req.Cancel("rpc-client", false); err != nil {
		t.Fatal(err)
	}
	if _, err := channel(t, obsConn).QueueDeclarePassive(name, false, false, false, false, nil); !isCode(err, 404) {
		t.Fatalf("passive declare of a cancelled consumer's name: %v", err)
	}
	replyOutcome(t, obs, confirms, returns, name, []byte("to a cancelled consumer"))

	// The refusals, on the requester's node.
	if _, err := channel(t, reqConn).Consume(replyQueue, "", false, false, false, false, nil); !isReason(err, 406, "PRECONDITION_FAILED - reply consumer cannot acknowledge") {
		t.Fatalf("consumer that acknowledges: %v", err)
	}
	if _, err := req.Consume(replyQueue, "", true, false, false, false, nil); err != nil {
		t.Fatalf("reply consumer after a cancel: %v", err)
	}
	if _, err := req.Consume(replyQueue, "", true, false, false, false, nil); !isReason(err, 406, "PRECONDITION_FAILED - reply consumer already set") {
		t.Fatalf("second reply consumer: %v", err)
	}
	other := channel(t, reqConn)
	closed := other.NotifyClose(make(chan *amqp.Error, 1))
	_ = other.Publish("", "feat.rpc", false, false, amqp.Publishing{ReplyTo: replyQueue})
	select {
	case e := <-closed:
		if !isReason(e, 406, "PRECONDITION_FAILED - fast reply consumer does not exist") {
			t.Fatalf("request without a reply consumer: %v", e)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a request without a reply consumer was taken")
	}

	// Once the requester's channel is closed its name is gone: replies
	// are dropped (and still confirmed).
	req, second := newRequester(t, reqConn, "feat.rpc")
	if second == name {
		t.Fatal("a new channel's reply consumer has the old name")
	}
	if err := req.Close(); err != nil {
		t.Fatal(err)
	}
	replyOutcome(t, obs, confirms, returns, second, []byte("to a closed channel"))
	if _, err := channel(t, obsConn).QueueDeclarePassive(second, false, false, false, false, nil); !isCode(err, 404) {
		t.Fatalf("passive declare of a closed channel's name: %v", err)
	}

	if c == nil {
		return
	}
	// A requester whose node died: the reply is dropped at once, and the
	// responder's channel goes on.
	_, third := newRequester(t, reqConn, "feat.rpc")
	c.Kill(0)
	start := time.Now()
	replyOutcome(t, obs, confirms, returns, third, []byte("to a dead node"))
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("a reply to a dead node took %v", took)
	}
	if _, err := channel(t, obsConn).QueueDeclarePassive(third, false, false, false, false, nil); !isCode(err, 404) {
		t.Fatalf("passive declare of a dead node's name: %v", err)
	}
}

// newRequester opens a channel on conn with a reply consumer, makes one
// request of queue's responder and returns the channel and the name its
// reply came to.
func newRequester(t *testing.T, conn *amqp.Connection, queue string) (*amqp.Channel, string) {
	t.Helper()
	req := channel(t, conn)
	replies, err := req.Consume(replyQueue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := req.Publish("", queue, false, false, amqp.Publishing{ReplyTo: replyQueue, Body: []byte("again")}); err != nil {
		t.Fatal(err)
	}
	return req, receive(t, replies, 1, 30*time.Second)[0].RoutingKey
}

func isCode(err error, code int) bool {
	var e *amqp.Error
	return errors.As(err, &e) && e.Code == code
}

func isReason(err error, code int, reason string) bool {
	var e *amqp.Error
	return errors.As(err, &e) && e.Code == code && e.Reason == reason
}
