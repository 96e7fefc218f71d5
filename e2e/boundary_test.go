package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// loginAtOpen polls addr until it takes a TCP connection and logs in as
// guest on that very connection: a node must not open its AMQP port before
// it can authenticate. It gives up when ctx ends.
func loginAtOpen(ctx context.Context, addr string) error {
	var nc net.Conn
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			nc = c
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the port never opened: %w", err)
		case <-time.After(2 * time.Millisecond):
		}
	}
	used := false
	conn, err := amqp.DialConfig("amqp://guest:guest@"+addr+"/", amqp.Config{
		Dial: func(string, string) (net.Conn, error) {
			if used {
				return nil, errors.New("dialled twice")
			}
			used = true
			return nc, nil
		},
	})
	if err != nil {
		_ = nc.Close()
		return fmt.Errorf("login on the first connection: %w", err)
	}
	return conn.Close()
}

// A correct login the moment the AMQP port opens succeeds, on a new data
// dir (where the default user is created by the first leader) and on a
// node started again on its data.
func TestBoundary_LoginTheMomentThePortOpens(t *testing.T) {
	skipShort(t)
	bin := Binary(t)
	for i := 0; i < 3; i++ {
		c := &Cluster{t: t, bin: bin, root: t.TempDir()}
		t.Cleanup(func() {
			for i, n := range c.Nodes {
				if n.Running() {
					c.Stop(i)
				}
			}
			if t.Failed() {
				c.DumpLogs()
			}
		})
		c.place(t, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		c.Start(0)
		err := loginAtOpen(ctx, c.Nodes[0].AMQPAddr)
		cancel()
		if err != nil {
			t.Fatalf("fresh node, run %d: %v", i+1, err)
		}
		if i == 0 {
			c.Stop(0)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			c.Start(0)
			err := loginAtOpen(ctx, c.Nodes[0].AMQPAddr)
			cancel()
			if err != nil {
				t.Fatalf("restarted node: %v", err)
			}
		}
		c.Stop(0)
	}
}

// notUTF8 makes s a string that is not valid UTF-8.
func notUTF8(s string) string { return s + "-\xff\xfe\xc3(" }

// On a three-node cluster: every node takes a login the moment its port
// opens; bytes that are not UTF-8 pass through a follower unharmed; and a
// user confined to some names stays inside them.
func TestBoundary_ThreeNodes(t *testing.T) {
	skipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var (
		mu     sync.Mutex
		logins = map[*Node]chan error{}
	)
	c := StartClusterWith(t, 3, func(_ int, n *Node) {
		done := make(chan error, 1)
		mu.Lock()
		logins[n] = done
		mu.Unlock()
		go func() { done <- loginAtOpen(ctx, n.AMQPAddr) }()
	})
	t.Run("LoginTheMomentThePortOpens", func(t *testing.T) {
		for _, n := range c.Nodes {
			mu.Lock()
			done := logins[n]
			mu.Unlock()
			if err := <-done; err != nil {
				t.Errorf("%s at start: %v", n.ID, err)
			}
		}
	})
	t.Run("BytesInBytesOutThroughAFollower", func(t *testing.T) { bytesThroughAFollower(ctx, t, c) })
	t.Run("ConfinedUser", func(t *testing.T) { confinedUser(t, c) })
}

// bytesThroughAFollower: a publish whose message-id, routing key and
// header key are not UTF-8, sent through a follower with confirms, is
// confirmed and consumed byte for byte on another node, while a bystander
// publishing on the same follower meanwhile gets every confirm and loses
// nothing.
func bytesThroughAFollower(ctx context.Context, t *testing.T, c *Cluster) {
	f := follower(t, c)
	var other *Node
	for _, n := range c.Nodes {
		if n != f {
			other = n
			break
		}
	}
	key, mid, hkey := notUTF8("rk"), notUTF8("id"), notUTF8("h")
	setup := channel(t, dial(t, other))
	mustDeclare(t, setup, "odd.q", nil)
	mustDeclare(t, setup, "bystander.q", nil)
	if err := setup.QueueBind("odd.q", key, "amq.direct", false, nil); err != nil {
		t.Fatal(err)
	}

	// The bystander publishes on its own connection to the follower, 20
	// confirms in flight at a time, from before the odd publish until a
	// while after it is confirmed.
	const window, after = 20, 200
	running, oddDone := make(chan struct{}), make(chan struct{})
	type tally struct {
		sent int
		err  error
	}
	bystander := make(chan tally, 1)
	bconn := dial(t, f)
	go func() {
		ch, err := bconn.Channel()
		if err == nil {
			err = ch.Confirm(false)
		}
		if err != nil {
			bystander <- tally{err: err}
			return
		}
		sent, extra := 0, -1
		for round := 1; extra < after; round++ {
			dcs := make([]*amqp.DeferredConfirmation, 0, window)
			for range window {
				sent++
				dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", "bystander.q", false, false,
					amqp.Publishing{Body: []byte(fmt.Sprint(sent))})
				if err != nil {
					bystander <- tally{sent, err}
					return
				}
				dcs = append(dcs, dc)
			}
			for _, dc := range dcs {
				if ok, err := dc.WaitContext(ctx); err != nil || !ok {
					bystander <- tally{sent, fmt.Errorf("publish %d: confirmed %v, %v", dc.DeliveryTag, ok, err)}
					return
				}
			}
			if round == 3 {
				close(running)
			}
			select {
			case <-oddDone:
				extra = max(extra, 0) + window
			default:
			}
		}
		bystander <- tally{sent: sent}
	}()
	select {
	case <-running:
	case by := <-bystander:
		t.Fatalf("bystander before the odd publish: %v", by.err)
	}

	pub := channel(t, dial(t, f))
	if err := pub.Confirm(false); err != nil {
		t.Fatal(err)
	}
	odd := amqp.Publishing{
		MessageId: mid, CorrelationId: notUTF8("corr"), Type: notUTF8("type"), AppId: notUTF8("app"),
		Headers: amqp.Table{hkey: notUTF8("value")}, Body: []byte("\x00\xff body"),
	}
	dc, err := pub.PublishWithDeferredConfirmWithContext(ctx, "amq.direct", key, true, false, odd)
	if err != nil {
		t.Fatal(err)
	}
	ok, err := dc.WaitContext(ctx)
	close(oddDone)
	if err != nil || !ok {
		t.Errorf("the odd publish: confirmed %v, %v", ok, err)
	}
	by := <-bystander
	if by.err != nil {
		t.Errorf("bystander on the same follower, after %d publishes: %v", by.sent, by.err)
	}
	if t.Failed() {
		return
	}

	cons := channel(t, dial(t, other))
	ds, err := cons.Consume("odd.q", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := receive(t, ds, 1, 10*time.Second)[0]
	if d.RoutingKey != key || d.MessageId != odd.MessageId || d.CorrelationId != odd.CorrelationId ||
		d.Type != odd.Type || d.AppId != odd.AppId || !bytes.Equal(d.Body, odd.Body) {
		t.Fatalf("consumed %q %q %q %q %q %q, want %q %q %q %q %q %q",
			d.RoutingKey, d.MessageId, d.CorrelationId, d.Type, d.AppId, d.Body,
			key, odd.MessageId, odd.CorrelationId, odd.Type, odd.AppId, odd.Body)
	}
	if v, ok := d.Headers[hkey]; !ok || v != notUTF8("value") || len(d.Headers) != 1 {
		t.Fatalf("headers %q, want {%q: %q}", d.Headers, hkey, notUTF8("value"))
	}
	q, err := cons.QueueDeclarePassive("bystander.q", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Messages != by.sent {
		t.Fatalf("bystander.q holds %d messages, the bystander had %d confirmed", q.Messages, by.sent)
	}
	t.Logf("odd publish confirmed and consumed on %s; bystander on %s: %d publishes, all confirmed and queued", other.ID, f.ID, by.sent)
}

// confinedUser: a user confined to names starting with "u." cannot reach
// other exchanges through a dead-letter or an alternate exchange, nor
// publish as someone else.
func confinedUser(t *testing.T, c *Cluster) {
	f := follower(t, c)
	ctl(t, f, "add_user", "u", "pw")
	ctl(t, f, "set_permissions", "u", `^u\.`, `^u\.`, `^u\.`)
	var conn *amqp.Connection
	if err := Eventually(10*time.Second, func() error { // the user reaches every node's state
		cn, err := amqp.Dial("amqp://u:pw@" + f.AMQPAddr + "/")
		conn = cn
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	refused := func(what string, code int, op func(ch *amqp.Channel) error) {
		t.Helper()
		ch := channel(t, conn)
		err := op(ch)
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != code {
			t.Fatalf("%s: %v, want %d", what, err, code)
		}
		t.Logf("%s: %v", what, ae)
	}
	refused("queue dead-lettering to amq.fanout", amqp.AccessRefused, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare("u.q", false, false, false, false, amqp.Table{"x-dead-letter-exchange": "amq.fanout"})
		return err
	})
	refused("exchange with amq.fanout as alternate", amqp.AccessRefused, func(ch *amqp.Channel) error {
		return ch.ExchangeDeclare("u.x", "direct", false, false, false, false, amqp.Table{"alternate-exchange": "amq.fanout"})
	})
	// Inside her names the same declares work; a publish with her own
	// user-id is confirmed, and an ack of tag 0 with multiple set and
	// nothing outstanding is a no-op.
	ch := channel(t, conn)
	if err := ch.ExchangeDeclare("u.dlx", "fanout", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare("u.x", "direct", false, false, false, false, amqp.Table{"alternate-exchange": "u.dlx"}); err != nil {
		t.Fatalf("alternate exchange inside her names: %v", err)
	}
	if _, err := ch.QueueDeclare("u.q", false, false, false, false, amqp.Table{"x-dead-letter-exchange": "u.dlx"}); err != nil {
		t.Fatalf("dead-letter exchange inside her names: %v", err)
	}
	// RabbitMQ looks the exchange up first: u.x exists now.
	refused("publish with user-id guest", amqp.PreconditionFailed, func(ch *amqp.Channel) error {
		closed := ch.NotifyClose(make(chan *amqp.Error, 1))
		if err := ch.PublishWithContext(context.Background(), "u.x", "k", false, false, amqp.Publishing{UserId: "guest"}); err != nil {
			return err
		}
		select {
		case e := <-closed:
			if e != nil && e.Reason != "PRECONDITION_FAILED - user_id property set to 'guest' but authenticated user was 'u'" {
				t.Errorf("reason %q", e.Reason)
			}
			if e == nil {
				return errors.New("closed without an error")
			}
			return e
		case <-time.After(10 * time.Second):
			return errors.New("not refused")
		}
	})
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "u.x", "k", false, false, amqp.Publishing{UserId: "u"})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(context.Background()); err != nil || !ok {
		t.Fatalf("publish with her own user-id: %v %v", ok, err)
	}
	if err := ch.Ack(0, true); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclarePassive("u.q", false, false, false, false, nil); err != nil {
		t.Fatalf("the channel after ack 0 multiple: %v", err)
	}
}
