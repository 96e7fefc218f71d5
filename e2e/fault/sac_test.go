package fault

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/raftmq/raftmq/e2e"
	"github.com/raftmq/raftmq/proto"
)

// The single-active-consumer scenario: a queue with
// x-single-active-consumer, its first consumer on one follower (the
// active one) and a second on the other, one publisher of numbered
// messages on the leader. The active consumer's node is killed; the
// checker wants one consumer receiving at any moment, the other taking
// over, the queue's order kept (only the unacked messages of the killed
// consumer may come again, flagged redelivered), nothing confirmed lost
// and equal digests. Run it alone with
//
//	go test ./e2e/fault -run TestFaultSingleActiveConsumer -v
const (
	sacQueue    = "fault.sac"
	sacPrefetch = 10
	sacActive   = "active"  // consumer tag of the first consumer
	sacStandby  = "standby" // and of the second
)

// sacMessage is the publisher's message number seq.
func sacMessage(seq int) (*sent, amqp.Publishing) {
	s := &sent{id: fmt.Sprintf("sac-%07d", seq), queue: sacQueue, ttl: noTTL}
	return s, amqp.Publishing{MessageId: s.id, DeliveryMode: amqp.Persistent, Body: []byte(s.id)}
}

// sacDelivery is one message a consumer of the queue received.
type sacDelivery struct {
	seq         int
	redelivered bool
	at          time.Time
}

// sacConsumer is one of the two consumers: it acks what it receives,
// every ackEvery deliveries at once, and stops when its connection ends
// (it stands for a client on that node, so it does not move to another).
type sacConsumer struct {
	tag  string
	node *node
	rec  *recorder
	mu   sync.Mutex
	got  []sacDelivery
	done chan struct{}
}

// startSACConsumer registers the consumer (consume-ok received) and
// serves it until ctx ends or its connection fails.
func startSACConsumer(ctx context.Context, t *testing.T, n *node, tag string, ackEvery int, rec *recorder) *sacConsumer {
	t.Helper()
	conn, ch, err := open(n)
	if err != nil {
		t.Fatalf("%s on %s: %v", tag, n.id, err)
	}
	if err := ch.Qos(sacPrefetch, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(sacQueue, tag, false, false, false, false, nil)
	if err != nil {
		t.Fatalf("%s on %s: consume: %v", tag, n.id, err)
	}
	s := &sacConsumer{tag: tag, node: n, rec: rec, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer conn.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case d, ok := <-ds:
				if !ok {
					return
				}
				var seq int
				if _, err := fmt.Sscanf(d.MessageId, "sac-%d", &seq); err != nil {
					seq = -1
				}
				at := time.Now()
				s.mu.Lock()
				s.got = append(s.got, sacDelivery{seq: seq, redelivered: d.Redelivered, at: at})
				s.mu.Unlock()
				rec.delivered(delivery{id: d.MessageId, queue: sacQueue, redelivered: d.Redelivered, at: at, node: n.id})
				if len(s.deliveries())%ackEvery == 0 {
					_ = d.Ack(true)
				}
			}
		}
	}()
	return s
}

func (s *sacConsumer) deliveries() []sacDelivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sacDelivery(nil), s.got...)
}

// sacViolations checks what the two consumers received: the active one
// alone until the fault, the standby alone after it (all of the active's
// receipts precede the standby's first), each in the queue's order, and
// the standby taking over with messages published after the fault.
func sacViolations(active, standby []sacDelivery, faultAt time.Time) []string {
	var bad []string
	ordered := func(who string, ds []sacDelivery) {
		for i := 1; i < len(ds); i++ {
			if ds[i].seq <= ds[i-1].seq {
				bad = append(bad, fmt.Sprintf("%s received %d after %d: out of the queue's order", who, ds[i].seq, ds[i-1].seq))
				return
			}
		}
	}
	ordered(sacActive, active)
	ordered(sacStandby, standby)
	for _, d := range active {
		if d.redelivered {
			bad = append(bad, fmt.Sprintf("%s received %d redelivered, with no fault before it", sacActive, d.seq))
			break
		}
	}
	switch {
	case len(active) == 0:
		bad = append(bad, "the first consumer received nothing: it was not the active one")
	case len(standby) == 0:
		bad = append(bad, "the second consumer never took over")
	default:
		if first := standby[0]; first.at.Before(faultAt) {
			bad = append(bad, fmt.Sprintf("%s received %d before the fault, while %s was active", sacStandby, first.seq, sacActive))
		}
		if last := active[len(active)-1]; !last.at.Before(standby[0].at) {
			bad = append(bad, fmt.Sprintf("both consumers received at once: %s got %d at %v, %s got %d at %v",
				sacActive, last.seq, last.at.Format(time.StampMilli), sacStandby, standby[0].seq, standby[0].at.Format(time.StampMilli)))
		}
		// What the standby gets of what the active got is a redelivery.
		maxActive := active[len(active)-1].seq
		for _, d := range standby {
			if d.seq <= maxActive && !d.redelivered {
				bad = append(bad, fmt.Sprintf("%s received %d, which %s had got, without the redelivered flag", sacStandby, d.seq, sacActive))
				break
			}
		}
	}
	return bad
}

// sentAt is when message id was published (zero if it was not).
func (r *recorder) sentAt(id string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.sent[id]; s != nil {
		return s.at
	}
	return time.Time{}
}

// sacStatuses lists the queue's consumers by tag with their activity
// status, from the leader's state.
func (c *cluster) sacStatuses(i int) (map[string]string, error) {
	a, done := c.admin(i)
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cs, err := a.ListConsumers(ctx, &proto.ListRequest{Vhost: "/", Consistent: true})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, ci := range cs.GetConsumers() {
		if ci.GetQueue() == sacQueue {
			out[ci.GetConsumer().GetTag()] = ci.GetActivityStatus()
		}
	}
	return out, nil
}

// awaitStatuses waits until node i lists the queue's consumers as want.
func (c *cluster) awaitStatuses(i int, want map[string]string) error {
	return e2e.Eventually(30*time.Second, func() error {
		got, err := c.sacStatuses(i)
		if err != nil {
			return err
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("consumers %v, want %v", got, want)
		}
		return nil
	})
}

func TestFaultSingleActiveConsumer(t *testing.T) {
	skipWithoutDocker(t)
	c := startCluster(t, "sac")
	if err := c.withChannel(30*time.Second, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(sacQueue, true, false, false, false, amqp.Table{"x-single-active-consumer": true})
		return err
	}); err != nil {
		t.Fatalf("declare %s: %v", sacQueue, err)
	}
	l := c.leader()
	ai, si := (l+1)%len(c.nodes), (l+2)%len(c.nodes)
	rec := newRecorder()
	cctx, stopConsumers := context.WithCancel(context.Background())
	defer stopConsumers()
	// The active consumer acks five at a time, so that it holds unacked
	// messages when its node dies: they come again, to the standby first.
	active := startSACConsumer(cctx, t, c.nodes[ai], sacActive, 5, rec)
	standby := startSACConsumer(cctx, t, c.nodes[si], sacStandby, 1, rec)
	if err := c.awaitStatuses(l, map[string]string{sacActive: "single_active", sacStandby: "waiting"}); err != nil {
		t.Fatal(err)
	}

	pctx, stopPublishing := context.WithCancel(context.Background())
	defer stopPublishing()
	published := make(chan struct{})
	go func() {
		defer close(published)
		seq := 0
		for attempt := l; pctx.Err() == nil; attempt++ {
			if err := publishConfirming(pctx, rec, c.nodes[attempt%len(c.nodes)], &seq, sacMessage); err != nil && pctx.Err() == nil {
				pause(pctx, 200*time.Millisecond)
			}
		}
	}()
	if err := e2e.Eventually(30*time.Second, func() error {
		if n := len(active.deliveries()); n < 300 {
			return fmt.Errorf("the active consumer received %d", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	faultAt := time.Now()
	c.kill(ai)
	// The standby takes over once the log declares the node down; it must
	// then get what is published after the fault too.
	if err := e2e.Eventually(60*time.Second, func() error {
		n := 0
		for _, d := range standby.deliveries() {
			if s := rec.sentAt(fmt.Sprintf("sac-%07d", d.seq)); s.After(faultAt) {
				n++
			}
		}
		if n < 200 {
			return fmt.Errorf("the standby received %d messages published after the fault", n)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	if err := c.awaitStatuses(si, map[string]string{sacStandby: "single_active"}); err != nil {
		t.Errorf("after the fault: %v", err)
	}
	stopPublishing()
	publishEnd := time.Now()
	<-published
	if err := e2e.Eventually(60*time.Second, func() error {
		if n := rec.missing(); n > 0 {
			return fmt.Errorf("%d confirmed messages not yet received", n)
		}
		return nil
	}); err != nil {
		t.Errorf("drain: %v", err)
	}
	stopConsumers()
	<-active.done
	<-standby.done

	// The killed node comes back and catches up: the three replicas agree.
	c.start(ai)
	for _, b := range c.notBack {
		t.Fatal(b)
	}
	c.waitMembers()
	if err := c.digestsAgree(60 * time.Second); err != nil {
		t.Errorf("state digests differ: %v", err)
	}

	rep, bad := rec.check("sac-kill-active", limits{deliveryGrace: deliveryGrace}, faultAt, publishEnd)
	bad = append(bad, sacViolations(active.deliveries(), standby.deliveries(), faultAt)...)
	for _, b := range bad {
		t.Error(b)
	}
	var tbl strings.Builder
	writeTable(&tbl, []report{rep})
	t.Logf("%s killed at +0 (its consumer was the active one); active received %d, standby %d:\n%s",
		c.nodes[ai].id, len(active.deliveries()), len(standby.deliveries()), tbl.String())
	appendReport(t, tbl.String())
}

// Without docker: the checker of the scenario catches what it is there
// to catch.
func TestSACCheck(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	d := func(seq, at int, redelivered bool) sacDelivery {
		return sacDelivery{seq: seq, at: ms(at), redelivered: redelivered}
	}
	fault := ms(100)
	clean := func() ([]sacDelivery, []sacDelivery) {
		return []sacDelivery{d(1, 10, false), d(2, 20, false), d(3, 30, false)},
			[]sacDelivery{d(3, 2000, true), d(4, 2001, false), d(5, 2002, false)}
	}
	a, s := clean()
	if bad := sacViolations(a, s, fault); len(bad) != 0 {
		t.Fatalf("violations in a clean failover: %v", bad)
	}
	for _, tc := range []struct {
		name string
		bend func(a, s []sacDelivery) ([]sacDelivery, []sacDelivery)
		want string
	}{
		{"out of order", func(a, s []sacDelivery) ([]sacDelivery, []sacDelivery) {
			s[1], s[2] = s[2], s[1]
			return a, s
		}, "out of the queue's order"},
		{"standby before the fault", func(a, s []sacDelivery) ([]sacDelivery, []sacDelivery) {
			return a, append([]sacDelivery{d(0, 50, false)}, s...)
		}, "before the fault"},
		{"both at once", func(a, s []sacDelivery) ([]sacDelivery, []sacDelivery) {
			return append(a, d(9, 2500, false)), s
		}, "both consumers received at once"},
		{"redelivery unflagged", func(a, s []sacDelivery) ([]sacDelivery, []sacDelivery) {
			s[0].redelivered = false
			return a, s
		}, "without the redelivered flag"},
		{"no takeover", func(a, s []sacDelivery) ([]sacDelivery, []sacDelivery) { return a, nil }, "never took over"},
		{"nothing active", func(a, s []sacDelivery) ([]sacDelivery, []sacDelivery) { return nil, s }, "not the active one"},
	} {
		a, s := clean()
		a, s = tc.bend(a, s)
		bad := sacViolations(a, s, fault)
		if !strings.Contains(strings.Join(bad, "\n"), tc.want) {
			t.Errorf("%s: violations %v, want one saying %q", tc.name, bad, tc.want)
		}
	}
}
