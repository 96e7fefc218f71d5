package fault

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/raftmq/raftmq/e2e"
	"github.com/raftmq/raftmq/proto"
)

// The topology every scenario runs on.
const (
	workQueue  = "fault.work"  // consumed on every node; messages of mixed TTLs
	delayQueue = "fault.delay" // x-message-ttl, never consumed: every message dies
	deadQueue  = "fault.dead"  // what the dead-letter exchange routes to
	dlx        = "fault.dlx"
	delayTTL   = time.Second

	// usedLeaseTTL is the x-expires of the queue the workload keeps using.
	usedLeaseTTL = 10 * time.Second
	usedLease    = "fault.lease.used"
)

// Workload settings: a paced publisher per node, a window of unconfirmed
// publishes, how long a publisher waits for a confirm before it gives up on
// its node and dials the next one.
const (
	publishEvery   = 4 * time.Millisecond
	confirmWindow  = 32
	confirmTimeout = 5 * time.Second
	prefetch       = 50
)

// workload drives one scenario's clients.
type workload struct {
	t     *testing.T
	c     *cluster
	rec   *recorder
	pubs  sync.WaitGroup // publishers and getters
	cons  sync.WaitGroup // consumers
	stopP context.CancelFunc
	stopC context.CancelFunc
	pctx  context.Context
	cctx  context.Context
}

// dial connects to node i with a bounded handshake.
func dial(n *node) (*amqp.Connection, error) {
	return amqp.DialConfig(n.amqpURL(), amqp.Config{
		Heartbeat: 2 * time.Second,
		Dial:      amqp.DefaultDial(3 * time.Second),
	})
}

// open connects to n and opens a channel; closing the connection closes
// both.
func open(n *node) (*amqp.Connection, *amqp.Channel, error) {
	conn, err := dial(n)
	if err != nil {
		return nil, nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, ch, nil
}

// withChannel runs f on a fresh channel of a connection to any node that
// answers, trying each in turn until timeout.
func (c *cluster) withChannel(timeout time.Duration, f func(*amqp.Channel) error) error {
	i := 0
	return e2e.Eventually(timeout, func() error {
		conn, ch, err := open(c.nodes[i%len(c.nodes)])
		i++
		if err != nil {
			return err
		}
		defer conn.Close()
		return f(ch)
	})
}

// declareTopology declares the exchanges and queues of the workload.
// waitPlacing returns once a queue declared lands in a queue group: the
// metadata leader switches placement on once the groups run.
func (c *cluster) waitPlacing() {
	c.t.Helper()
	const probe = "fault.placement-probe"
	err := c.withChannel(60*time.Second, func(ch *amqp.Channel) error {
		if _, err := ch.QueueDeclare(probe, true, false, false, false, nil); err != nil {
			return err
		}
		a, done := c.admin(0)
		defer done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		q, err := a.GetQueue(ctx, &proto.GetQueueRequest{Vhost: "/", Name: probe})
		if err != nil {
			return err
		}
		if _, err := ch.QueueDelete(probe, false, false, false); err != nil {
			return err
		}
		if q.GetRaftGroup() == "metadata" {
			return errors.New("queues are not placed into queue groups yet")
		}
		return nil
	})
	if err != nil {
		c.t.Fatalf("placement: %v", err)
	}
}

func (c *cluster) declareTopology() {
	c.t.Helper()
	err := c.withChannel(30*time.Second, func(ch *amqp.Channel) error {
		if err := ch.ExchangeDeclare(dlx, "fanout", true, false, false, false, nil); err != nil {
			return err
		}
		if _, err := ch.QueueDeclare(deadQueue, true, false, false, false, nil); err != nil {
			return err
		}
		if err := ch.QueueBind(deadQueue, "", dlx, false, nil); err != nil {
			return err
		}
		if _, err := ch.QueueDeclare(workQueue, true, false, false, false, amqp.Table{"x-dead-letter-exchange": dlx}); err != nil {
			return err
		}
		_, err := ch.QueueDeclare(delayQueue, true, false, false, false, amqp.Table{
			"x-dead-letter-exchange": dlx, "x-message-ttl": int32(delayTTL / time.Millisecond)})
		return err
	})
	if err != nil {
		c.t.Fatalf("declare topology: %v", err)
	}
}

// declareLease declares an x-expires queue and returns when the declare was
// sent.
func (c *cluster) declareLease(name string, expires time.Duration) time.Time {
	c.t.Helper()
	var at time.Time
	err := c.withChannel(30*time.Second, func(ch *amqp.Channel) error {
		at = time.Now()
		_, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{"x-expires": int32(expires / time.Millisecond)})
		return err
	})
	if err != nil {
		c.t.Fatalf("declare %s: %v", name, err)
	}
	return at
}

// exists reports whether queue exists, by a consistent read (the leader's
// state, after a barrier) through node i's admin API: a node that has just
// restarted may not have applied the declare yet. ok is false when no
// answer came. It does not use a passive queue.declare: like a redeclare,
// that renews an x-expires lease.
func (c *cluster) exists(i int, queue string) (exists, ok bool) {
	a, done := c.admin(i)
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	qs, err := a.ListQueues(ctx, &proto.ListQueuesRequest{Vhost: "/", Consistent: true})
	if err != nil {
		return false, false
	}
	for _, q := range qs.Queues {
		if q.Name == queue {
			return true, true
		}
	}
	return false, true
}

// watchLease polls queue until it is gone, through whichever node answers,
// and returns when it was first found missing (zero if not before ctx).
func (c *cluster) watchLease(ctx context.Context, queue string) <-chan time.Time {
	out := make(chan time.Time, 1)
	go func() {
		defer close(out)
		for i := 0; ; i++ {
			if e, ok := c.exists(i%len(c.nodes), queue); ok && !e {
				out <- time.Now()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return out
}

// startWorkload starts a publisher, a consumer of workQueue, a consumer of
// deadQueue and a getter of the used lease queue on each node.
func (c *cluster) startWorkload() *workload {
	w := &workload{t: c.t, c: c, rec: newRecorder()}
	w.pctx, w.stopP = context.WithCancel(context.Background())
	w.cctx, w.stopC = context.WithCancel(context.Background())
	c.t.Cleanup(func() { w.stopP(); w.stopC(); w.pubs.Wait(); w.cons.Wait() })
	for i := range c.nodes {
		w.cons.Add(2)
		go w.consume(i, workQueue)
		go w.consume(i, deadQueue)
	}
	for i := range c.nodes {
		w.pubs.Add(2)
		go w.publish(i)
		go w.get(i, usedLease)
	}
	return w
}

// stopPublishing stops the publishers and getters and waits for them.
func (w *workload) stopPublishing() {
	w.stopP()
	w.pubs.Wait()
}

// stopConsuming stops the consumers and waits for them.
func (w *workload) stopConsuming() {
	w.stopC()
	w.cons.Wait()
}

// pause waits d or until publishing stops.
func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// publish runs publisher p, starting on node p and moving to the next node
// whenever its connection fails or a confirm takes too long.
func (w *workload) publish(p int) {
	defer w.pubs.Done()
	seq := 0
	for attempt := p; w.pctx.Err() == nil; attempt++ {
		if err := w.publishOn(p, w.c.nodes[attempt%len(w.c.nodes)], &seq); err != nil && w.pctx.Err() == nil {
			pause(w.pctx, 200*time.Millisecond)
		}
	}
}

func (w *workload) publishOn(p int, n *node, seq *int) error {
	return publishConfirming(w.pctx, w.rec, n, seq, func(seq int) (*sent, amqp.Publishing) { return message(p, seq) })
}

// publishConfirming publishes next's messages (numbered on from *seq) on
// a confirming channel to n, one every publishEvery with at most
// confirmWindow unconfirmed, recording each in rec, until ctx ends and
// every publish is confirmed, or the channel fails or a confirm takes
// longer than confirmTimeout.
func publishConfirming(ctx context.Context, rec *recorder, n *node, seq *int, next func(seq int) (*sent, amqp.Publishing)) error {
	conn, ch, confirms, err := openConfirming(n, confirmWindow)
	if err != nil {
		return err
	}
	defer conn.Close()
	var pending []string // ids by delivery tag, from tag next-len(pending)
	tick := time.NewTicker(publishEvery)
	defer tick.Stop()
	lastProgress := time.Now()
	for {
		var ticks <-chan time.Time
		if len(pending) < confirmWindow && ctx.Err() == nil {
			ticks = tick.C
		}
		if ctx.Err() != nil && len(pending) == 0 {
			return nil
		}
		select {
		case cf, ok := <-confirms:
			if !ok {
				return errors.New("channel closed")
			}
			id := pending[0]
			pending = pending[1:]
			if cf.Ack {
				rec.confirmed(id, time.Now())
			}
			lastProgress = time.Now()
		case <-ticks:
			*seq++
			s, msg := next(*seq)
			s.at = time.Now()
			rec.published(s)
			ctx, cancel := context.WithTimeout(context.Background(), confirmTimeout)
			err := ch.PublishWithContext(ctx, "", s.queue, false, false, msg)
			cancel()
			if err != nil {
				return err
			}
			pending = append(pending, s.id)
		case <-time.After(time.Until(lastProgress.Add(confirmTimeout))):
			if len(pending) > 0 {
				return fmt.Errorf("no confirm for %v", confirmTimeout)
			}
			lastProgress = time.Now()
		}
	}
}

// openConfirming opens a channel to n in confirm mode and returns its
// confirms, buffered for window unanswered publishes.
func openConfirming(n *node, window int) (*amqp.Connection, *amqp.Channel, <-chan amqp.Confirmation, error) {
	conn, ch, err := open(n)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := ch.Confirm(false); err != nil {
		conn.Close()
		return nil, nil, nil, err
	}
	return conn, ch, ch.NotifyPublish(make(chan amqp.Confirmation, window)), nil
}

// message is publisher p's message number seq: the mix of TTLs the suite
// runs on.
func message(p, seq int) (*sent, amqp.Publishing) {
	s := &sent{id: fmt.Sprintf("p%d-%d", p, seq), queue: workQueue, ttl: noTTL}
	msg := amqp.Publishing{MessageId: s.id, DeliveryMode: amqp.Persistent, Body: []byte(s.id)}
	expire := func(d time.Duration) {
		msg.Expiration = strconv.FormatInt(int64(d/time.Millisecond), 10)
		s.ttl = d
	}
	switch seq % 8 {
	case 2:
		expire(0)
	case 3:
		expire(300 * time.Millisecond)
	case 4:
		expire(20 * time.Second)
	case 5, 6:
		s.queue, s.ttl = delayQueue, delayTTL
	case 7:
		s.queue = delayQueue
		expire(500 * time.Millisecond)
	}
	return s, msg
}

// consume runs a consumer of queue, starting on node i and moving on when
// its connection fails or the broker cancels it.
func (w *workload) consume(i int, queue string) {
	defer w.cons.Done()
	for attempt := i; w.cctx.Err() == nil; attempt++ {
		if err := w.consumeOn(w.c.nodes[attempt%len(w.c.nodes)], queue); err != nil && w.cctx.Err() == nil {
			pause(w.cctx, 200*time.Millisecond)
		}
	}
}

func (w *workload) consumeOn(n *node, queue string) error {
	conn, ch, err := open(n)
	if err != nil {
		return err
	}
	defer conn.Close()
	return e2e.ConsumeAcking(w.cctx, ch, queue, prefetch, func(d amqp.Delivery) {
		w.rec.delivered(delivery{id: d.MessageId, queue: queue, redelivered: d.Redelivered, at: time.Now(), reason: deathReason(d.Headers), node: n.id})
	})
}

// deathReason is the reason of the newest x-death entry.
func deathReason(h amqp.Table) string {
	deaths, _ := h["x-death"].([]any)
	if len(deaths) == 0 {
		return ""
	}
	t, _ := deaths[0].(amqp.Table)
	r, _ := t["reason"].(string)
	return r
}

// get keeps queue in use with a basic.get every half second through node
// i (moving on when it fails), so its x-expires lease never runs out.
func (w *workload) get(i int, queue string) {
	defer w.pubs.Done()
	for attempt := i; w.pctx.Err() == nil; attempt++ {
		conn, ch, err := open(w.c.nodes[attempt%len(w.c.nodes)])
		if err != nil {
			pause(w.pctx, 200*time.Millisecond)
			continue
		}
		for err == nil && w.pctx.Err() == nil {
			_, _, err = ch.Get(queue, true)
			pause(w.pctx, 500*time.Millisecond)
		}
		conn.Close()
	}
}
