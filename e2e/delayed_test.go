package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The x-delayed-message exchange as the delayed-message plugin's clients
// use it, on three nodes: publisher and consumer on different nodes.

func declareDelayed(t *testing.T, ch *amqp.Channel, name, typ string) {
	t.Helper()
	if err := ch.ExchangeDeclare(name, "x-delayed-message", true, false, false, false, amqp.Table{"x-delayed-type": typ}); err != nil {
		t.Fatalf("declare %s: %v", name, err)
	}
}

// confirmOne publishes m and waits for its confirm; it fails the test on a
// nack.
func confirmOne(t *testing.T, ch *amqp.Channel, x, key string, mandatory bool, m amqp.Publishing) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, x, key, mandatory, false, m)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	if ok, err := dc.WaitContext(ctx); err != nil || !ok {
		t.Fatalf("confirm: ok=%v err=%v", ok, err)
	}
}

func confirming(t *testing.T, conn *amqp.Connection) *amqp.Channel {
	t.Helper()
	ch := channel(t, conn)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	return ch
}

func delayed(body string, delay any) amqp.Publishing {
	p := amqp.Publishing{Body: []byte(body)}
	if delay != nil {
		p.Headers = amqp.Table{"x-delay": delay}
	}
	return p
}

// queued is the ready count of q on ch's node.
func queued(t *testing.T, ch *amqp.Channel, q string) int {
	t.Helper()
	st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("declare passive %s: %v", q, err)
	}
	return st.Messages
}

// receiveOne waits up to timeout for the next delivery.
func receiveOne(t *testing.T, dl <-chan amqp.Delivery, timeout time.Duration) amqp.Delivery {
	t.Helper()
	select {
	case d, ok := <-dl:
		if !ok {
			t.Fatal("consumer closed")
		}
		return d
	case <-time.After(timeout):
		t.Fatalf("no delivery within %v", timeout)
	}
	return amqp.Delivery{}
}

// none fails if a delivery arrives within d.
func none(t *testing.T, dl <-chan amqp.Delivery, d time.Duration) {
	t.Helper()
	select {
	case m := <-dl:
		t.Fatalf("unexpected delivery %q (x-delay %v)", m.Body, m.Headers["x-delay"])
	case <-time.After(d):
	}
}

func consumeOn(t *testing.T, conn *amqp.Connection, q string) <-chan amqp.Delivery {
	t.Helper()
	ch := channel(t, conn)
	dl, err := ch.Consume(q, "", true, false, false, false, nil)
	if err != nil {
		t.Fatalf("consume %s: %v", q, err)
	}
	return dl
}

// consumeThroughFailover consumes q on node n with auto-ack while a
// leader may be changing: a basic.consume whose commit the change left
// unknown ends with 541 INTERNAL_ERROR, and the consume is made again on
// a fresh channel, as a client would; a connection closed meanwhile (541
// is a connection exception in AMQP 0-9-1; its close reason is logged)
// is dialled again.
func consumeThroughFailover(t *testing.T, n *Node, q string) <-chan amqp.Delivery {
	t.Helper()
	var dl <-chan amqp.Delivery
	var conn *amqp.Connection
	var closed chan *amqp.Error
	errOther := errors.New("not an unknown outcome")
	err := Eventually(30*time.Second, func() error {
		if conn == nil || conn.IsClosed() {
			if conn != nil {
				select {
				case e := <-closed:
					t.Logf("%s closed the connection: %v; dialling again", n.ID, e)
				default:
				}
			}
			conn = dial(t, n)
			closed = conn.NotifyClose(make(chan *amqp.Error, 1))
		}
		ch, err := conn.Channel()
		if err != nil {
			return err // the connection closed under it: dialled again
		}
		d, err := ch.Consume(q, "", true, false, false, false, nil)
		var e *amqp.Error
		if err != nil && !conn.IsClosed() && (!errors.As(err, &e) || e.Code != amqp.InternalError) {
			return fmt.Errorf("%w: %v", errOther, err)
		}
		dl = d
		return err
	}, errOther)
	if err != nil {
		t.Fatalf("consume %s: %v", q, err)
	}
	return dl
}

// closedWith runs a declare on a fresh channel and returns its error.
func closedWith(t *testing.T, conn *amqp.Connection, args amqp.Table) *amqp.Error {
	t.Helper()
	ch := channel(t, conn)
	err := ch.ExchangeDeclare("bad-delayed", "x-delayed-message", true, false, false, false, args)
	var e *amqp.Error
	if !errors.As(err, &e) {
		t.Fatalf("declare with %v: %v, want a channel error", args, err)
	}
	return e
}

func TestDelayed_AMQP091(t *testing.T) {
	skipShort(t)
	forShapes(t, twoShapes, delayedAMQP091)
}

func delayedAMQP091(t *testing.T, s shape) {
	c := s.start(t)
	pubConn, consConn := dial(t, c.Nodes[0]), dial(t, c.Nodes[2])
	setup := channel(t, pubConn)

	t.Run("declare refusals", func(t *testing.T) {
		for _, tc := range []struct {
			args amqp.Table
			code int
			text string
		}{
			{nil, 406, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must be an existing exchange type"},
			{amqp.Table{"x-delayed-type": int32(1)}, 406, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must be an existing exchange type"},
			{amqp.Table{"x-delayed-type": "x-delayed-message"}, 406, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'"},
			{amqp.Table{"x-delayed-type": "x-consistent-hash"}, 503, "COMMAND_INVALID - unknown exchange type 'x-consistent-hash'"},
		} {
			// 503 is a connection error: each case gets a connection.
			if e := closedWith(t, dial(t, c.Nodes[1]), tc.args); e.Code != tc.code || e.Reason != tc.text {
				t.Errorf("%v: %d %q, want %d %q", tc.args, e.Code, e.Reason, tc.code, tc.text)
			}
		}
	})

	t.Run("delay, confirm, negated header", func(t *testing.T) {
		declareDelayed(t, setup, "dl-basic", "direct")
		mustDeclare(t, setup, "dl-basic-q", nil)
		if err := setup.QueueBind("dl-basic-q", "k", "dl-basic", false, nil); err != nil {
			t.Fatal(err)
		}
		dl := consumeOn(t, consConn, "dl-basic-q")
		pub := confirming(t, pubConn)
		const delay = 1500
		start := time.Now()
		// Every form the plugin reads: AMQP integers, a string, a float.
		for i, v := range []any{int32(delay), int64(delay), fmt.Sprint(delay), float64(delay) + 0.7, int16(delay)} {
			confirmOne(t, pub, "dl-basic", "k", false, delayed(fmt.Sprint("m", i), v))
		}
		// Confirmed, not yet routed: the queue is empty on the publisher's
		// node once the confirms are in.
		if n := queued(t, pub, "dl-basic-q"); n != 0 {
			t.Fatalf("%d queued before the delay is over", n)
		}
		seen := map[string]bool{}
		for range 5 {
			d := receiveOne(t, dl, 30*time.Second)
			if el := elapsed(start); el < delay*time.Millisecond {
				t.Fatalf("%q delivered after %v, before its delay of %d ms", d.Body, el, delay)
			}
			if v, ok := d.Headers["x-delay"].(int32); !ok || v != -delay {
				t.Fatalf("%q: x-delay %#v, want int32 %d", d.Body, d.Headers["x-delay"], -delay)
			}
			if seen[string(d.Body)] {
				t.Fatalf("%q delivered twice", d.Body)
			}
			seen[string(d.Body)] = true
		}
		none(t, dl, 300*time.Millisecond)

		// No header, 0, negative, too long, or not a number: routed at once.
		for i, v := range []any{nil, int32(0), int32(-200), int64(1 << 32), "soon"} {
			confirmOne(t, pub, "dl-basic", "k", false, delayed(fmt.Sprint("now", i), v))
			d := receiveOne(t, dl, 30*time.Second)
			if string(d.Body) != fmt.Sprint("now", i) {
				t.Fatalf("got %q, want now%d", d.Body, i)
			}
		}
	})

	t.Run("released in due order", func(t *testing.T) {
		declareDelayed(t, setup, "dl-order", "fanout")
		mustDeclare(t, setup, "dl-order-q", nil)
		if err := setup.QueueBind("dl-order-q", "", "dl-order", false, nil); err != nil {
			t.Fatal(err)
		}
		dl := consumeOn(t, consConn, "dl-order-q")
		pub := confirming(t, pubConn)
		start := time.Now()
		for _, d := range []int32{2400, 800, 1600} {
			confirmOne(t, pub, "dl-order", "any", false, delayed(fmt.Sprint(d), d))
		}
		for _, want := range []int{800, 1600, 2400} {
			d := receiveOne(t, dl, 30*time.Second)
			if string(d.Body) != fmt.Sprint(want) {
				t.Fatalf("got %q, want %d", d.Body, want)
			}
			if el := elapsed(start); el < time.Duration(want)*time.Millisecond {
				t.Fatalf("%q delivered after %v, before its delay", d.Body, el)
			}
		}
	})

	t.Run("headers routing", func(t *testing.T) {
		declareDelayed(t, setup, "dl-headers", "headers")
		mustDeclare(t, setup, "dl-headers-q", nil)
		if err := setup.QueueBind("dl-headers-q", "", "dl-headers", false, amqp.Table{"x-match": "all", "kind": "job"}); err != nil {
			t.Fatal(err)
		}
		dl := consumeOn(t, consConn, "dl-headers-q")
		pub := confirming(t, pubConn)
		start := time.Now()
		confirmOne(t, pub, "dl-headers", "", false, amqp.Publishing{Body: []byte("other"), Headers: amqp.Table{"kind": "other", "x-delay": int32(500)}})
		confirmOne(t, pub, "dl-headers", "", false, amqp.Publishing{Body: []byte("job"), Headers: amqp.Table{"kind": "job", "x-delay": int32(1000)}})
		d := receiveOne(t, dl, 30*time.Second)
		if el := elapsed(start); string(d.Body) != "job" || el < time.Second {
			t.Fatalf("got %q after %v", d.Body, el)
		}
		none(t, dl, 300*time.Millisecond)
	})

	t.Run("routed with the bindings of the release", func(t *testing.T) {
		declareDelayed(t, setup, "dl-topic", "topic")
		mustDeclare(t, setup, "dl-early", nil)
		mustDeclare(t, setup, "dl-late", nil)
		if err := setup.QueueBind("dl-early", "a.*", "dl-topic", false, nil); err != nil {
			t.Fatal(err)
		}
		pub := confirming(t, pubConn)
		confirmOne(t, pub, "dl-topic", "a.b", false, delayed("moved", int32(1500)))
		// While it waits, the early queue loses its binding and the late
		// one gains one.
		if err := setup.QueueUnbind("dl-early", "a.*", "dl-topic", nil); err != nil {
			t.Fatal(err)
		}
		if err := setup.QueueBind("dl-late", "#", "dl-topic", false, nil); err != nil {
			t.Fatal(err)
		}
		d := receiveOne(t, consumeOn(t, consConn, "dl-late"), 30*time.Second)
		if string(d.Body) != "moved" || d.Exchange != "dl-topic" || d.RoutingKey != "a.b" {
			t.Fatalf("got %q from %q with %q", d.Body, d.Exchange, d.RoutingKey)
		}
		if n := queued(t, pub, "dl-early"); n != 0 {
			t.Fatalf("the unbound queue got %d", n)
		}
	})

	t.Run("mandatory", func(t *testing.T) {
		declareDelayed(t, setup, "dl-mand", "direct")
		mustDeclare(t, setup, "dl-mand-q", nil)
		if err := setup.QueueBind("dl-mand-q", "bound", "dl-mand", false, nil); err != nil {
			t.Fatal(err)
		}
		pub := confirming(t, pubConn)
		returns := pub.NotifyReturn(make(chan amqp.Return, 4))
		// Would reach no queue now: returned at once, and not kept.
		confirmOne(t, pub, "dl-mand", "nowhere", true, delayed("lost", int32(1000)))
		select {
		case r := <-returns:
			if r.ReplyCode != 312 || string(r.Body) != "lost" {
				t.Fatalf("return %d %q", r.ReplyCode, r.Body)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no basic.return for an unroutable mandatory delayed publish")
		}
		if err := setup.QueueBind("dl-mand-q", "nowhere", "dl-mand", false, nil); err != nil {
			t.Fatal(err)
		}
		// Routable now: kept, not returned, delivered after its delay.
		confirmOne(t, pub, "dl-mand", "bound", true, delayed("kept", int32(1000)))
		dl := consumeOn(t, consConn, "dl-mand-q")
		if d := receiveOne(t, dl, 30*time.Second); string(d.Body) != "kept" {
			t.Fatalf("got %q, want kept (the returned one must not come)", d.Body)
		}
		select {
		case r := <-returns:
			t.Fatalf("a routable delayed publish was returned: %q", r.Body)
		default:
		}
		none(t, dl, 1500*time.Millisecond)
	})

	t.Run("through a leader kill", func(t *testing.T) {
		declareDelayed(t, setup, "dl-kill", "direct")
		mustDeclare(t, setup, "dl-kill-q", nil)
		if err := setup.QueueBind("dl-kill-q", "k", "dl-kill", false, nil); err != nil {
			t.Fatal(err)
		}
		li := leaderIndex(t, c, 0)
		others := []int{}
		for i := range c.Nodes {
			if i != li {
				others = append(others, i)
			}
		}
		pc := dial(t, c.Nodes[others[0]])
		pub := confirming(t, pc)
		start := time.Now()
		const delay = 3000
		for i := range 20 {
			confirmOne(t, pub, "dl-kill", "k", false, delayed(fmt.Sprint(i), int32(delay+i*50)))
		}
		c.Kill(li)
		dl := consumeThroughFailover(t, c.Nodes[others[1]], "dl-kill-q")
		seen := map[string]bool{}
		for range 20 {
			d := receiveOne(t, dl, 60*time.Second)
			if el := elapsed(start); el < delay*time.Millisecond {
				t.Fatalf("%q delivered after %v, before its delay", d.Body, el)
			}
			if seen[string(d.Body)] {
				t.Fatalf("%q delivered twice", d.Body)
			}
			seen[string(d.Body)] = true
		}
		none(t, dl, time.Second)
		c.Start(li)
		c.WaitReady(li, 60*time.Second)
	})

	t.Run("through a restart of every node", func(t *testing.T) {
		conn := dial(t, c.Nodes[1])
		sc := channel(t, conn)
		declareDelayed(t, sc, "dl-restart", "direct")
		mustDeclare(t, sc, "dl-restart-q", nil)
		if err := sc.QueueBind("dl-restart-q", "k", "dl-restart", false, nil); err != nil {
			t.Fatal(err)
		}
		pub := confirming(t, conn)
		start := time.Now()
		const delay = 4000
		for i := range 10 {
			confirmOne(t, pub, "dl-restart", "k", false, delayed(fmt.Sprint(i), int32(delay)))
		}
		c.RestartAll(60 * time.Second)
		dl := consumeOn(t, dial(t, c.Nodes[2]), "dl-restart-q")
		seen := map[string]bool{}
		for range 10 {
			d := receiveOne(t, dl, 60*time.Second)
			if el := elapsed(start); el < delay*time.Millisecond {
				t.Fatalf("%q delivered after %v, before its delay", d.Body, el)
			}
			if seen[string(d.Body)] {
				t.Fatalf("%q delivered twice", d.Body)
			}
			seen[string(d.Body)] = true
		}
		none(t, dl, time.Second)
	})
}

// TestDelayed_Pika: the plugin's usage from Python (pika), publisher and
// consumer on different nodes, of three and of five, with one log and
// with queue groups.
func TestDelayed_Pika(t *testing.T) {
	skipShort(t)
	py := pythonWithPika(t)
	forShapes(t, everyShape, func(t *testing.T, s shape) {
		c := s.start(t)
		runPika(t, "pika_delayed.py", py, c.Nodes[0].AMQPURL(), c.Nodes[s.nodes-1].AMQPURL())
	})
}
