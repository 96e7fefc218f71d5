package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// prefetchConsumer counts what its client holds unacknowledged and fails
// the test the moment it holds more than its prefetch.
type prefetchConsumer struct {
	t        *testing.T
	who      string
	prefetch int
	ch       *amqp.Channel
	d        <-chan amqp.Delivery
	held     []amqp.Delivery // received, not yet acked or nacked
}

func newPrefetchConsumer(t *testing.T, who, url, queue string, prefetch int) *prefetchConsumer {
	t.Helper()
	ch := channel(t, dialURL(t, url))
	if err := ch.Qos(prefetch, 0, false); err != nil {
		t.Fatal(err)
	}
	d, err := ch.Consume(queue, who, false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &prefetchConsumer{t: t, who: who, prefetch: prefetch, ch: ch, d: d}
}

// next receives one delivery and checks the prefetch.
func (c *prefetchConsumer) next(timeout time.Duration) amqp.Delivery {
	c.t.Helper()
	m := receive(c.t, c.d, 1, timeout)[0]
	c.held = append(c.held, m)
	if len(c.held) > c.prefetch {
		c.t.Fatalf("%s holds %d unacknowledged deliveries, prefetch %d", c.who, len(c.held), c.prefetch)
	}
	return m
}

// A consumer with prefetch 10 whose look-ahead grows while it drains a
// backlog never holds more than 10 unacknowledged, whether it acks
// one by one, several at once or nacks some back; when its node dies with
// deliveries written and held, another consumer gets every message it had
// not acked, the ones it held flagged redelivered, and none twice.
func TestCredit_PrefetchHoldsWhileTheCreditGrowsAndThroughACrash(t *testing.T) {
	var urls []string
	var c *Cluster
	if os.Getenv("RAFTMQ_E2E_RABBITMQ") != "" {
		urls, c = brokersIn(t, shape{nodes: 3})
	} else {
		// A look-ahead of one prefetch (credit 20): any round trip longer
		// than a millisecond starves it while the backlog lasts.
		skipShort(t)
		c = StartClusterWith(t, 3, func(_ int, n *Node) { n.ExtraArgs = append(n.ExtraArgs, "--consumer-lookahead", "1") })
		for _, n := range c.Nodes {
			urls = append(urls, n.AMQPURL())
		}
	}
	const queue, total, prefetch = "credit.prefetch", 6000, 10
	pub := channel(t, dialURL(t, urls[0]))
	freshQueue(t, pub, queue, nil)
	// A backlog: the log assigns a as fast as its acks return credit, so
	// its node's look-ahead runs dry and grows.
	for i := 0; i < total; i += 500 {
		publishConfirmed(t, pub, "", queue, numbered(i, i+500))
	}
	a := newPrefetchConsumer(t, "a", urls[1], queue, prefetch)

	acked := map[string]bool{} // settled by a (its node may die before some commit)
	r := rand.New(rand.NewPCG(1, 2))
	for len(acked) < total/2 {
		a.next(60 * time.Second)
		switch x := r.IntN(40); {
		case x == 0 && len(a.held) > 0: // nack one back to the queue
			m := a.held[0]
			if err := m.Nack(false, true); err != nil {
				t.Fatal(err)
			}
			a.held = a.held[1:]
		case x < 4 || len(a.held) == prefetch: // ack all it holds at once
			if err := a.held[len(a.held)-1].Ack(true); err != nil {
				t.Fatal(err)
			}
			for _, m := range a.held {
				acked[string(m.Body)] = true
			}
			a.held = nil
		case x < 30: // ack the oldest
			if err := a.held[0].Ack(false); err != nil {
				t.Fatal(err)
			}
			acked[string(a.held[0].Body)] = true
			a.held = a.held[1:]
		}
	}
	unacked := map[string]bool{}
	for _, m := range a.held {
		unacked[string(m.Body)] = true
	}
	if c != nil {
		// The backlog starved a's look-ahead: its node grew it.
		if n := scrape(t, c.Nodes[1], "raftmq_consumer_credit_raised_total"); n < 1 {
			t.Fatalf("a's node raised its credit %v times, want at least once", n)
		}
		// a's node dies with a's written and held deliveries.
		c.Kill(1)
	} else if err := a.ch.Close(); err != nil {
		t.Fatal(err)
	}

	b := newPrefetchConsumer(t, "b", urls[2], queue, prefetch)
	got := map[string]bool{}
	for missing := total - len(acked); missing > 0; {
		m := b.next(90 * time.Second)
		body := string(m.Body)
		if got[body] {
			t.Fatalf("b got %s twice", body)
		}
		got[body] = true
		if unacked[body] && !m.Redelivered {
			t.Fatalf("b got %s, which a held unacknowledged, without the redelivered flag", body)
		}
		if !acked[body] {
			missing--
		}
		if err := m.Ack(false); err != nil {
			t.Fatal(err)
		}
		b.held = b.held[:0]
	}
	for i := range total {
		if body := fmt.Sprint(i); !acked[body] && !got[body] {
			t.Fatalf("message %s was neither acked by a nor delivered to b", body)
		}
	}
}
