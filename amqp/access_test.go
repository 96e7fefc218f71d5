package amqp

import (
	"context"
	"errors"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/raftmq/raftmq/proto"
)

func TestAccess_PublishWithoutWritePermissionIsRefused(t *testing.T) {
	ts := startServer(t, Config{})
	// alice may configure and read anything, and write only to queues and
	// exchanges whose names start with "ok-".
	ts.broker.mu.Lock()
	ts.broker.perms = map[string][3]string{"alice": {".*", "^ok-", ".*"}}
	ts.broker.mu.Unlock()
	conn, err := amqp091.Dial("amqp://alice:secret@" + ts.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	if err := ch.PublishWithContext(context.Background(), "logs", "k", false, false, amqp091.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	e := <-closed
	if e == nil || e.Code != amqp091.AccessRefused {
		t.Fatalf("channel closed with %v, want 403 ACCESS_REFUSED", e)
	}
	if n := len(commandsOf(ts.broker, (*proto.Command).GetPublish)); n != 0 {
		t.Fatalf("%d refused publishes reached the log", n)
	}
	// The connection stays up, and allowed resources still work.
	ch2, err := conn.Channel()
	if err != nil {
		t.Fatalf("connection closed by a channel error: %v", err)
	}
	if err := ch2.PublishWithContext(context.Background(), "ok-logs", "k", false, false, amqp091.Publishing{Body: []byte("y")}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch2.QueueDeclare("ok-q", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	// Binding needs write on the queue: "audit" is not writable.
	err = ch2.QueueBind("audit", "k", "ok-logs", false, nil)
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != amqp091.AccessRefused {
		t.Fatalf("bind to a queue without write permission: %v", err)
	}
	if n := len(commandsOf(ts.broker, (*proto.Command).GetPublish)); n != 1 {
		t.Fatalf("%d publishes in the log, want the allowed one", n)
	}
}

func TestAccess_VhostWithoutPermissionsIsRefused(t *testing.T) {
	ts := startServer(t, Config{})
	ts.broker.mu.Lock()
	ts.broker.vhosts["other"] = true
	ts.broker.vhosts["closed"] = true
	ts.broker.denied = map[[2]string]bool{{"guest", "closed"}: true}
	ts.broker.mu.Unlock()
	// RabbitMQ: "access to vhost 'closed' refused for user 'guest'".
	_, err := amqp091.Dial("amqp://guest:guest@" + ts.addr + "/closed")
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != amqp091.NotAllowed {
		t.Fatalf("open of a vhost without access: %v, want 530 NOT_ALLOWED", err)
	}
	conn, err := amqp091.Dial("amqp://guest:guest@" + ts.addr + "/other")
	if err != nil {
		t.Fatalf("open of a permitted vhost: %v", err)
	}
	conn.Close()
}

func TestPermissions_MatchAndRecompile(t *testing.T) {
	var p permissions
	if !p.match([3]string{".*", "^a", ""}, accessWrite, "abc") || p.match([3]string{".*", "^a", ""}, accessWrite, "xa") {
		t.Fatal("write pattern ^a")
	}
	if p.match([3]string{".*", "^a", ""}, accessRead, "anything") {
		t.Fatal("an empty pattern must match nothing")
	}
	if !p.match([3]string{".*", "^x", ""}, accessWrite, "xa") {
		t.Fatal("a changed pattern was not recompiled")
	}
	if p.match([3]string{".*", "(", ""}, accessWrite, "(") {
		t.Fatal("an invalid pattern must match nothing")
	}
}

// TestAccess_PermissionRevokedMidChannelRefusesNextPublish: a channel
// remembers the exchanges it was allowed to write, yet a change of the
// user's permissions in the applied state refuses its next publish.
func TestAccess_PermissionRevokedMidChannelRefusesNextPublish(t *testing.T) {
	ts := startServer(t, Config{})
	ts.broker.mu.Lock()
	ts.broker.perms = map[string][3]string{"alice": {".*", ".*", ".*"}}
	ts.broker.mu.Unlock()
	conn, err := amqp091.Dial("amqp://alice:secret@" + ts.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	type confirmed struct {
		ch       *amqp091.Channel
		confirms chan amqp091.Confirmation
		closed   chan *amqp091.Error
	}
	open := func() confirmed {
		t.Helper()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		return confirmed{ch, ch.NotifyPublish(make(chan amqp091.Confirmation, 8)), ch.NotifyClose(make(chan *amqp091.Error, 1))}
	}
	publish := func(c confirmed, exchange string) {
		t.Helper()
		if err := c.ch.PublishWithContext(context.Background(), exchange, "k", false, false, amqp091.Publishing{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	// Each channel publishes twice to its exchange (the default one is
	// checked as amq.default): the second is allowed by what the channel
	// remembers of the first.
	named, dflt := open(), open()
	for _, p := range []struct {
		c confirmed
		x string
	}{{named, "logs"}, {named, "logs"}, {dflt, ""}, {dflt, ""}} {
		publish(p.c, p.x)
		if c := <-p.c.confirms; !c.Ack {
			t.Fatalf("publish to %q nacked", p.x)
		}
	}
	// Write is revoked on everything but "ok-" exchanges.
	ts.broker.mu.Lock()
	ts.broker.perms = map[string][3]string{"alice": {".*", "^ok-", ".*"}}
	ts.broker.mu.Unlock()
	publish(named, "logs")
	publish(dflt, "")
	for _, c := range []confirmed{named, dflt} {
		// The client closes confirms when the channel closes.
		confirms := c.confirms
		for done := false; !done; {
			select {
			case e := <-c.closed:
				if e == nil || e.Code != amqp091.AccessRefused {
					t.Fatalf("channel closed with %v, want 403 ACCESS_REFUSED", e)
				}
				done = true
			case cf, ok := <-confirms:
				if ok {
					t.Fatalf("a publish after the revocation was confirmed: %+v", cf)
				}
				confirms = nil
			}
		}
	}
	if n := len(commandsOf(ts.broker, (*proto.Command).GetPublish)); n != 4 {
		t.Fatalf("%d publishes in the log, want the 4 allowed ones", n)
	}
}

// An alternate or dead-letter exchange that is not a string names no
// exchange: the channel refuses the declare with RabbitMQ's words for it,
// and nothing reaches the log.
func TestAccess_TargetExchangeOfAnotherTypeIsRefused(t *testing.T) {
	ts := startServer(t, Config{})
	conn, err := amqp091.Dial(ts.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, c := range []struct {
		declare func(*amqp091.Channel) error
		want    string
	}{
		{func(ch *amqp091.Channel) error {
			return ch.ExchangeDeclare("xae", "direct", false, false, false, false, amqp091.Table{"alternate-exchange": int32(5)})
		}, "PRECONDITION_FAILED - invalid type 'signedint' for arg 'alternate-exchange' in exchange 'xae' in vhost '/'"},
		{func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclare("dlx1", false, false, false, false, amqp091.Table{"x-dead-letter-exchange": true})
			return err
		}, "PRECONDITION_FAILED - invalid type 'bool' for arg 'x-dead-letter-exchange' in queue 'dlx1' in vhost '/'"},
	} {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		var ae *amqp091.Error
		if err := c.declare(ch); !errors.As(err, &ae) || ae.Code != amqp091.PreconditionFailed || ae.Reason != c.want {
			t.Errorf("declare: %v, want 406 %q", err, c.want)
		}
	}
	ts.broker.mu.Lock()
	defer ts.broker.mu.Unlock()
	for _, c := range ts.broker.cmds {
		if c.GetExchangeDeclare() != nil || c.GetQueueDeclare() != nil {
			t.Errorf("a declare reached the log: %v", c)
		}
	}
}
