package e2e

import (
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Delayed retry on queues (RabbitMQ 4.3's x-delayed-retry-*), on three
// nodes: publisher and consumer on different nodes.

// waitRetryLevel waits until the cluster's log is at protocol level 8,
// where a queue declared gets delayed retry: only from then on is an
// unknown x-delayed-retry-type refused.
func waitRetryLevel(t *testing.T, conn *amqp.Connection) {
	t.Helper()
	err := Eventually(30*time.Second, func() error {
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		_, err = ch.QueueDeclare("retry-level-probe", true, false, false, false, amqp.Table{"x-delayed-retry-type": "bogus"})
		var e *amqp.Error
		if errors.As(err, &e) && e.Code == 406 {
			return nil
		}
		if err == nil {
			_, _ = ch.QueueDelete("retry-level-probe", false, false, false)
			_ = ch.Close()
		}
		return errors.New("the log is below level 8")
	})
	if err != nil {
		t.Fatal(err)
	}
}

func count(h amqp.Table, k string) int64 {
	switch v := h[k].(type) {
	case int64:
		return v
	case int32:
		return int64(v)
	}
	return 0
}

func TestDelayedRetry_AMQP091(t *testing.T) {
	skipShort(t)
	forShapes(t, twoShapes, delayedRetryAMQP091)
}

func delayedRetryAMQP091(t *testing.T, s shape) {
	c := s.start(t)
	pubConn, consConn := dial(t, c.Nodes[0]), dial(t, c.Nodes[2])
	waitRetryLevel(t, pubConn)
	setup := channel(t, pubConn)

	t.Run("refusals", func(t *testing.T) {
		for _, tc := range []struct {
			args amqp.Table
			text string
		}{
			{amqp.Table{"x-delayed-retry-type": "sometimes"}, "PRECONDITION_FAILED - invalid arg 'x-delayed-retry-type' for queue 'rt-bad' in vhost '/': {unknown_delayed_retry_type,<<\"sometimes\">>}"},
			{amqp.Table{"x-delayed-retry-min": "5"}, "PRECONDITION_FAILED - invalid arg 'x-delayed-retry-min' for queue 'rt-bad' in vhost '/': \"expected integer, got longstr\""},
			{amqp.Table{"x-delayed-retry-max": int32(-1)}, "PRECONDITION_FAILED - invalid arg 'x-delayed-retry-max' for queue 'rt-bad' in vhost '/': {value_negative,-1}"},
		} {
			ch := channel(t, pubConn)
			_, err := ch.QueueDeclare("rt-bad", true, false, false, false, tc.args)
			var e *amqp.Error
			if !errors.As(err, &e) || e.Code != 406 || e.Reason != tc.text {
				t.Errorf("%v: %v, want 406 %q", tc.args, err, tc.text)
			}
		}
	})

	t.Run("reject and nack wait, counted apart", func(t *testing.T) {
		mustDeclare(t, setup, "rt-q", amqp.Table{"x-queue-type": "quorum", "x-delayed-retry-type": "all",
			"x-delayed-retry-min": int32(800), "x-delayed-retry-max": int32(1400)})
		cons := channel(t, consConn)
		if err := cons.Qos(1, 0, false); err != nil {
			t.Fatal(err)
		}
		dl, err := cons.Consume("rt-q", "", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		confirmOne(t, confirming(t, pubConn), "", "rt-q", false, amqp.Publishing{Body: []byte("job")})
		d := receiveOne(t, dl, 30*time.Second)
		// reject (a failed attempt), reject, nack (a return only): waits of
		// 800 x 1, min(800 x 2, 1400), 800 x 2 capped again at 1400.
		steps := []struct {
			reject             bool
			wait               time.Duration
			acquired, delivery int64
		}{{true, 800, 1, 1}, {true, 1400, 2, 2}, {false, 1400, 3, 2}}
		for i, s := range steps {
			at := time.Now()
			if s.reject {
				err = d.Reject(true)
			} else {
				err = d.Nack(false, true)
			}
			if err != nil {
				t.Fatal(err)
			}
			if n := queued(t, setup, "rt-q"); n != 0 {
				t.Fatalf("step %d: %d ready while the message waits", i, n)
			}
			d = receiveOne(t, dl, 30*time.Second)
			if el := time.Since(at); el < s.wait*time.Millisecond {
				t.Fatalf("step %d: back after %v, before %d ms", i, el, s.wait)
			}
			if !d.Redelivered || count(d.Headers, "x-acquired-count") != s.acquired || count(d.Headers, "x-delivery-count") != s.delivery {
				t.Fatalf("step %d: redelivered %v headers %v, want acquired %d delivery %d", i, d.Redelivered, d.Headers, s.acquired, s.delivery)
			}
		}
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("delivery limit on failed attempts", func(t *testing.T) {
		mustDeclare(t, setup, "rt-dead", nil)
		mustDeclare(t, setup, "rt-lim", amqp.Table{"x-delayed-retry-type": "failed", "x-delayed-retry-min": int32(200),
			"x-delivery-limit": int32(1), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "rt-dead"})
		cons := channel(t, consConn)
		dl, err := cons.Consume("rt-lim", "", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		confirmOne(t, confirming(t, pubConn), "", "rt-lim", false, amqp.Publishing{Body: []byte("poison")})
		// Nacks count no failed attempt: at once, and never past the limit.
		for range 3 {
			if err := receiveOne(t, dl, 30*time.Second).Nack(false, true); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 {
			if err := receiveOne(t, dl, 30*time.Second).Reject(true); err != nil {
				t.Fatal(err)
			}
		}
		dead := consumeOn(t, pubConn, "rt-dead")
		if d := receiveOne(t, dead, 30*time.Second); string(d.Body) != "poison" {
			t.Fatalf("dead-lettered %q", d.Body)
		}
		none(t, dl, 500*time.Millisecond)
	})
}

// TestDelayedRetry_Pika: the same from Python (pika 1.2), publisher and
// consumer on different nodes, on three nodes with one log and five with
// queue groups.
func TestDelayedRetry_Pika(t *testing.T) {
	skipShort(t)
	py := pythonWithPika(t)
	forShapes(t, twoShapes, func(t *testing.T, s shape) {
		c := s.start(t)
		waitRetryLevel(t, dial(t, c.Nodes[1]))
		runPika(t, "pika_retry.py", py, c.Nodes[0].AMQPURL(), c.Nodes[s.nodes-1].AMQPURL())
	})
}
