package amqp

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/raftmq/raftmq/proto"
)

// confinedAlice makes alice a user confined to names starting with "u."
// for every permission kind, and opens a channel as her.
func confinedAlice(t *testing.T, ts *testServer) *amqp091.Channel {
	t.Helper()
	ts.broker.mu.Lock()
	ts.broker.perms = map[string][3]string{"alice": {`^u\.`, `^u\.`, `^u\.`}}
	ts.broker.mu.Unlock()
	conn, err := amqp091.Dial("amqp://alice:secret@" + ts.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func mustRefused(t *testing.T, err error, code int, what string) *amqp091.Error {
	t.Helper()
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != code {
		t.Fatalf("%s: %v, want %d", what, err, code)
	}
	return ae
}

// A confined user must not reach an exchange outside her names through a
// queue's dead-letter exchange (RabbitMQ: write on the dead-letter exchange,
// read on the queue).
func TestAccess_DeadLetterExchangeNeedsWrite(t *testing.T) {
	ts := startServer(t, Config{})
	ch := confinedAlice(t, ts)
	_, err := ch.QueueDeclare("u.q", false, false, false, false, amqp091.Table{"x-dead-letter-exchange": "amq.fanout"})
	ae := mustRefused(t, err, amqp091.AccessRefused, "queue with an outside dead-letter exchange")
	if !strings.Contains(ae.Reason, "exchange 'amq.fanout'") {
		t.Fatalf("reason %q does not name the dead-letter exchange", ae.Reason)
	}
	// The default exchange is checked as amq.default, as RabbitMQ does.
	ch = confinedAlice(t, ts)
	_, err = ch.QueueDeclare("u.q", false, false, false, false, amqp091.Table{"x-dead-letter-exchange": ""})
	mustRefused(t, err, amqp091.AccessRefused, "queue dead-lettering to the default exchange")
	if n := len(commandsOf(ts.broker, (*proto.Command).GetQueueDeclare)); n != 0 {
		t.Fatalf("%d refused declares reached the log", n)
	}
	ch = confinedAlice(t, ts)
	if _, err := ch.QueueDeclare("u.q", false, false, false, false, amqp091.Table{"x-dead-letter-exchange": "u.dlx"}); err != nil {
		t.Fatalf("dead-letter exchange inside her names: %v", err)
	}
	if n := len(commandsOf(ts.broker, (*proto.Command).GetQueueDeclare)); n != 1 {
		t.Fatalf("%d declares in the log, want the allowed one", n)
	}
}

func TestAccess_AlternateExchangeNeedsWrite(t *testing.T) {
	ts := startServer(t, Config{})
	ch := confinedAlice(t, ts)
	err := ch.ExchangeDeclare("u.x", "direct", false, false, false, false, amqp091.Table{"alternate-exchange": "amq.topic"})
	ae := mustRefused(t, err, amqp091.AccessRefused, "exchange with an outside alternate exchange")
	if !strings.Contains(ae.Reason, "exchange 'amq.topic'") {
		t.Fatalf("reason %q does not name the alternate exchange", ae.Reason)
	}
	if n := len(commandsOf(ts.broker, (*proto.Command).GetExchangeDeclare)); n != 0 {
		t.Fatalf("%d refused declares reached the log", n)
	}
	ch = confinedAlice(t, ts)
	if err := ch.ExchangeDeclare("u.x", "direct", false, false, false, false, amqp091.Table{"alternate-exchange": "u.ae"}); err != nil {
		t.Fatalf("alternate exchange inside her names: %v", err)
	}
	// A passive declare changes nothing and is not checked.
	if err := ch.ExchangeDeclarePassive("u.x", "direct", false, false, false, false, amqp091.Table{"alternate-exchange": "amq.topic"}); err != nil {
		t.Fatalf("passive declare: %v", err)
	}
}

// A user-id that is not the connection's user is RabbitMQ's 406 channel
// error; the publishes the client sent before it still reach the log and
// are confirmed.
func TestAccess_UserIDMustBeTheAuthenticatedUser(t *testing.T) {
	ts := startServer(t, Config{})
	// Hold the first publish so that the next three reach the worker
	// together and are handled as one run.
	release := make(chan struct{})
	held := make(chan struct{}, 1)
	first := true
	ts.broker.script(nil, func(c *proto.Command) {
		if c.GetPublish() != nil && first {
			first = false
			held <- struct{}{}
			<-release
		}
	})
	ch := confinedAlice(t, ts)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 8))
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	ctx := context.Background()
	publish := func(user string) {
		t.Helper()
		if err := ch.PublishWithContext(ctx, "u.x", "k", false, false, amqp091.Publishing{UserId: user, Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	publish("alice")
	<-held
	publish("alice")
	publish("")
	publish("bob")
	// Let the reader hand all three to the worker before it goes on.
	c := ts.srv.lookupFirst().channel(1)
	eventually(t, 5*time.Second, "three publishes queued", func() bool { return len(c.in) == 3 })
	close(release)
	e := mustClosedWith(t, closed, amqp091.PreconditionFailed)
	if want := "PRECONDITION_FAILED - user_id property set to 'bob' but authenticated user was 'alice'"; e.Reason != want {
		t.Fatalf("reason %q, want %q", e.Reason, want)
	}
	var acked []uint64
	for cf := range confirms {
		if !cf.Ack {
			t.Fatalf("publish %d nacked", cf.DeliveryTag)
		}
		acked = append(acked, cf.DeliveryTag)
	}
	if len(acked) != 3 || acked[2] != 3 {
		t.Fatalf("confirms %v, want 1, 2 and 3 before the close", acked)
	}
	pubs := commandsOf(ts.broker, (*proto.Command).GetPublish)
	if len(pubs) != 3 {
		t.Fatalf("%d publishes in the log, want the 3 before the refused one", len(pubs))
	}
	for _, p := range pubs {
		if u := p.GetProperties().UserId; u != nil && *u != "alice" {
			t.Fatalf("a publish with user-id %q reached the log", *u)
		}
	}
}

// basic.ack and basic.nack of tag 0 with multiple set ack everything
// outstanding: with nothing outstanding they are no-ops, as in RabbitMQ,
// and nothing goes to the log.
func TestAcks_MultipleZeroWithNothingOutstandingIsANoop(t *testing.T) {
	ts := startServer(t, Config{})
	_, ch := openChannel(t, ts)
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	if err := ch.Ack(0, true); err != nil {
		t.Fatal(err)
	}
	if err := ch.Nack(0, true, true); err != nil {
		t.Fatal(err)
	}
	if err := ch.Nack(0, true, false); err != nil {
		t.Fatal(err)
	}
	// A synchronous method after them: the channel is still open.
	if _, err := ch.QueueDeclare("q", false, false, false, false, nil); err != nil {
		t.Fatalf("channel after ack 0 multiple: %v", err)
	}
	select {
	case e := <-closed:
		t.Fatalf("channel closed: %v", e)
	default:
	}
	ts.broker.mu.Lock()
	defer ts.broker.mu.Unlock()
	for _, c := range ts.broker.cmds {
		if c.GetSettle() != nil || c.GetRequeue() != nil || c.GetDiscard() != nil {
			t.Fatalf("a settlement naming nothing reached the log: %v", c)
		}
	}
}
