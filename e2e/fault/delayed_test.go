package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/raftmq/raftmq/e2e"
)

// The delayed-message scenario: an x-delayed-message exchange (routing as
// direct) with one queue per publisher bound to it; each publisher (one
// per node) sends persistent messages with confirms, each with a unique
// id, its send time and an x-delay drawn uniformly from 1 to 20 s, until
// delayedTotal are confirmed; each queue has two consumers, starting on
// the two nodes other than its publisher's, each moving to the next node
// when its own dies.
// While the messages wait, the leader is killed with kill -9 and started
// again, then the new leader is frozen with docker pause for freezeFor.
// The checker wants every confirmed message released exactly once (a
// repeat flagged redelivered, after a consumer's node died, is a
// redelivery; an unflagged one a second release), none before its send
// time plus its delay (to the log's millisecond), each released copy
// carrying x-delay = minus its delay, nothing confirmed lost, and the 99th percentile of lateness
// (first receipt minus send time plus delay, over the messages confirmed
// within fastConfirm) at most delayedLateBound; the table says whether
// it met the 2 s target. Run it alone with
//
//	go test ./e2e/fault -run TestFaultDelayed -v
//
// RAFTMQ_FAULT_DELAYED sets another number of messages.

// logTimeResolution is how finely the log tells time: stamps are whole
// milliseconds, rounded down, so a message the test sends 0.9 ms into a
// millisecond and the leader stamps in the same one is due up to that
// much before its send time plus its delay as the test's clock reads it
// (and log time follows the quorum's clock readings, which differ from
// the test's by microseconds). Only a release earlier than that is early.
const logTimeResolution = time.Millisecond

const (
	delayedExchange = "fault.delayed"
	delayMin        = time.Second
	delayMax        = 20 * time.Second
	// delayedLateP99 is the target for the lateness at the 99th
	// percentile through a kill and a freeze. The table reports it met or
	// missed; it is a speed figure on a shared machine, so the scenario
	// does not fail on it. Each fault strands what the dead or frozen
	// node's two consumers were assigned (up to their prefetch each,
	// about 1% of the messages) until the cluster declares the node down,
	// 1.5 s after it fell silent: the 99th percentile lies in that cohort,
	// at 1.5-1.8 s on a quiet machine, and an election slowed by a loaded
	// one moves it past 2 s.
	delayedLateP99 = 2 * time.Second
	// delayedLateBound is the lateness at the 99th percentile that
	// fails the scenario: a node's silence not detected (its consumers'
	// messages held until the transport's 10 s timeout) or releases that
	// wait for something else than an election and a declared death.
	delayedLateBound = 5 * time.Second
	// delayedEvery paces each publisher: three of them send about 600
	// messages a second, so 10,000 take some 17 s and their due times
	// spread over both faults.
	delayedEvery = 5 * time.Millisecond
	// delayedDown is how long the killed leader stays down.
	delayedDown = 3 * time.Second
)

func delayedTotal() int {
	if n, err := strconv.Atoi(os.Getenv("RAFTMQ_FAULT_DELAYED")); err == nil && n > 0 {
		return n
	}
	return 10_000
}

// delayedQueue is publisher p's queue, and its routing key.
func delayedQueue(p int) string { return fmt.Sprintf("fault.delayed.%d", p) }

// delayedSent is one delayed publish as its publisher saw it.
type delayedSent struct {
	id    string
	delay time.Duration
	// at is when the publish was written, confirmed when its ack came
	// (zero if none did).
	at, confirmed time.Time
}

// delayedDelivery is one message a consumer received.
type delayedDelivery struct {
	id          string
	at          time.Time
	redelivered bool
	// mark is the x-delay header of the released copy (ms), marked
	// whether it had an integer one.
	mark   int64
	marked bool
	node   string
}

// delayedRecorder collects what the scenario's clients saw and hands
// out the publishers' budget: publishing stops once total are confirmed.
type delayedRecorder struct {
	mu        sync.Mutex
	total     int
	sent      map[string]*delayedSent
	got       []delayedDelivery
	confirmed int
	inflight  int
	done      chan struct{} // closed when total are confirmed
}

func newDelayedRecorder(total int) *delayedRecorder {
	return &delayedRecorder{total: total, sent: map[string]*delayedSent{}, done: make(chan struct{})}
}

// take reserves one publish of the budget; false when the publishes
// confirmed and in flight make up the total.
func (r *delayedRecorder) take() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.confirmed+r.inflight >= r.total {
		return false
	}
	r.inflight++
	return true
}

// settle ends a reserved publish: a confirm counts it, anything else (a
// nack, a channel that failed before the confirm) gives it back.
func (r *delayedRecorder) settle(s *delayedSent, ack bool, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inflight--
	r.sent[s.id] = s
	if ack {
		s.confirmed = at
		r.confirmed++
		if r.confirmed == r.total {
			close(r.done)
		}
	}
}

func (r *delayedRecorder) delivered(d delayedDelivery) {
	r.mu.Lock()
	r.got = append(r.got, d)
	r.mu.Unlock()
}

// missing is how many confirmed messages no consumer has received yet.
func (r *delayedRecorder) missing() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return unreceived(r.sent, r.got, func(s *delayedSent) bool { return !s.confirmed.IsZero() }, func(d delayedDelivery) string { return d.id })
}

// snapshot copies what was recorded, for the checker.
func (r *delayedRecorder) snapshot() (map[string]*delayedSent, []delayedDelivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sent := make(map[string]*delayedSent, len(r.sent))
	for id, s := range r.sent {
		c := *s
		sent[id] = &c
	}
	return sent, slices.Clone(r.got)
}

// delayedReport is the scenario's row of the table.
type delayedReport struct {
	scenario     string
	published    int
	confirmed    int
	released     int // confirmed messages received
	unconfirmed  int // unconfirmed publishes received all the same
	lost         int // confirmed, never received
	early        int // deliveries before send time plus delay
	redeliveries int // repeats flagged redelivered
	doubles      int // repeats without the flag: a second release
	unmarked     int // released copies without x-delay = -delay
	lateP99      time.Duration
	target       time.Duration // delayedLateP99, reported met or missed
	lateSamples  int           // messages confirmed within fastConfirm
	lateP99All   time.Duration
	lateMax      time.Duration
	dueInKill    int // confirmed messages due while the leader was down
	dueInFreeze  int // and while it was frozen
	nodesBack    bool
}

// faultWindows are the spells of the two faults, to count what fell due
// during each (zero: not measured).
type faultWindows struct {
	killFrom, killTo, freezeFrom, freezeTo time.Time
}

// delayedViolations reads the records against the rules: every confirmed
// message received, no id released twice (a repeat must carry the
// redelivered flag), nothing received before its send time plus its
// delay (the checker and the containers read one host clock: no
// allowance), the released copy marked with x-delay = -delay, and the
// 99th percentile of lateness over the messages confirmed within
// fastConfirm at most lateP99.
func delayedViolations(name string, sent map[string]*delayedSent, got []delayedDelivery, lateP99 time.Duration, fw faultWindows) (delayedReport, []string) {
	rep := delayedReport{scenario: name, published: len(sent), nodesBack: true}
	var bad []string
	add := func(n *int, f string, args ...any) {
		*n++
		if *n <= 10 {
			bad = append(bad, fmt.Sprintf(f, args...))
		} else if *n == 11 {
			bad = append(bad, "... (more of the same)")
		}
	}
	var ghosts int
	byID := map[string][]delayedDelivery{}
	for _, d := range got {
		if sent[d.id] == nil {
			add(&ghosts, "delivery of %q, which was never published", d.id)
			continue
		}
		byID[d.id] = append(byID[d.id], d)
	}
	var late, lateAll []time.Duration
	ids := make([]string, 0, len(sent))
	for id := range sent {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		s := sent[id]
		ds := byID[id]
		slices.SortStableFunc(ds, func(a, b delayedDelivery) int { return a.at.Compare(b.at) })
		due := s.at.Add(s.delay)
		if !s.confirmed.IsZero() {
			rep.confirmed++
			if !fw.killFrom.IsZero() && !due.Before(fw.killFrom) && due.Before(fw.killTo) {
				rep.dueInKill++
			}
			if !fw.freezeFrom.IsZero() && !due.Before(fw.freezeFrom) && due.Before(fw.freezeTo) {
				rep.dueInFreeze++
			}
		}
		if len(ds) == 0 {
			if !s.confirmed.IsZero() {
				add(&rep.lost, "confirmed message %s (x-delay %v) was never released", id, s.delay)
			}
			continue
		}
		if s.confirmed.IsZero() {
			rep.unconfirmed++
		} else {
			rep.released++
		}
		var first *delayedDelivery // the first unflagged copy received
		doubles := 0
		for i, d := range ds {
			if d.at.Before(due.Add(-logTimeResolution)) {
				add(&rep.early, "%s (x-delay %v) received by %s %v early", id, s.delay, d.node, due.Sub(d.at))
			}
			if !d.marked || d.mark != -s.delay.Milliseconds() {
				add(&rep.unmarked, "%s released with x-delay %d (present %v), want %d", id, d.mark, d.marked, -s.delay.Milliseconds())
			}
			// One copy goes out unflagged, the first release; the order
			// in which the consumers' goroutines record the copies says
			// nothing of which that was (the fault suite's check, in
			// record_test.go, explains why).
			switch {
			case d.redelivered:
			case first == nil:
				first = &ds[i]
			default:
				doubles++
				add(&rep.doubles, "%s released again, received by %s %v after its first unflagged receipt, without the redelivered flag",
					id, d.node, d.at.Sub(first.at))
			}
		}
		rep.redeliveries += len(ds) - 1 - doubles // the other repeats
		if s.confirmed.IsZero() {
			continue
		}
		l := ds[0].at.Sub(due)
		lateAll = append(lateAll, l)
		rep.lateMax = max(rep.lateMax, l)
		// A publish the fault held up was stamped some unknown moment
		// before its confirm: only a prompt confirm dates the due time.
		if s.confirmed.Sub(s.at) <= fastConfirm {
			late = append(late, l)
		}
	}
	rep.lateP99, rep.lateSamples = percentile(late, 0.99), len(late)
	rep.lateP99All = percentile(lateAll, 0.99)
	if rep.lateP99 > lateP99 {
		bad = append(bad, fmt.Sprintf("released %v after send time plus delay at the 99th percentile (of %d confirmed within %v), more than %v",
			rep.lateP99.Round(time.Millisecond), rep.lateSamples, fastConfirm, lateP99))
	}
	return rep, bad
}

// writeDelayedTable prints the scenario's row: released counts confirmed
// messages received, unconf unconfirmed ones received all the same;
// redeliv repeats flagged redelivered, double repeats without the flag;
// late-p99 is over the messages confirmed within fastConfirm (samples),
// p99-all over every confirmed one; due-kill and due-freeze count the
// confirmed messages due while the leader was down and frozen.
func writeDelayedTable(w io.Writer, reps []delayedReport) {
	fmt.Fprintf(w, "%-14s %9s %9s %9s %6s %5s %5s %7s %6s %8s %9s %11s %8s %8s %8s %8s %10s %10s\n",
		"scenario", "published", "confirmed", "released", "unconf", "lost", "early", "redeliv", "double", "unmarked",
		"late-p99", "p99-target", "samples", "p99-all", "late-max", "due-kill", "due-freeze", "nodes-back")
	for _, r := range reps {
		back := "yes"
		if !r.nodesBack {
			back = "NO"
		}
		target := "-"
		if r.target > 0 {
			target = fmt.Sprintf("%v met", r.target)
			if r.lateP99 > r.target {
				target = fmt.Sprintf("%v MISSED", r.target)
			}
		}
		fmt.Fprintf(w, "%-14s %9d %9d %9d %6d %5d %5d %7d %6d %8d %9v %11s %8d %8v %8v %8d %10d %10s\n",
			r.scenario, r.published, r.confirmed, r.released, r.unconfirmed, r.lost, r.early, r.redeliveries, r.doubles, r.unmarked,
			r.lateP99.Round(time.Millisecond), target, r.lateSamples, r.lateP99All.Round(time.Millisecond), r.lateMax.Round(time.Millisecond),
			r.dueInKill, r.dueInFreeze, back)
	}
}

// delayedMessage is publisher p's message number seq with its delay.
func delayedMessage(p, seq int) (*delayedSent, amqp.Publishing) {
	delay := delayMin + time.Duration(rand.Int64N(int64(delayMax-delayMin)/int64(time.Millisecond)+1))*time.Millisecond
	s := &delayedSent{id: fmt.Sprintf("d%d-%06d", p, seq), delay: delay, at: time.Now()}
	return s, amqp.Publishing{MessageId: s.id, DeliveryMode: amqp.Persistent, Body: []byte(s.id),
		Timestamp: s.at, Headers: amqp.Table{"x-delay": int32(delay.Milliseconds()), "sent-at": s.at.UnixNano()}}
}

// publishDelayed runs publisher p, starting on node p and moving to the
// next node whenever its connection fails or a confirm takes too long,
// until the recorder's budget is confirmed or ctx ends.
func publishDelayed(ctx context.Context, c *cluster, rec *delayedRecorder, p int) {
	seq := 0
	for attempt := p; ctx.Err() == nil; attempt++ {
		select {
		case <-rec.done:
			return
		default:
		}
		if err := publishDelayedOn(ctx, c.nodes[attempt%len(c.nodes)], rec, p, &seq); err != nil && ctx.Err() == nil {
			pause(ctx, 200*time.Millisecond)
		}
	}
}

func publishDelayedOn(ctx context.Context, n *node, rec *delayedRecorder, p int, seq *int) error {
	conn, ch, err := open(n)
	if err != nil {
		return err
	}
	defer conn.Close()
	var pending []*delayedSent // by delivery tag, oldest first
	defer func() {
		for _, s := range pending {
			rec.settle(s, false, time.Time{})
		}
	}()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, confirmWindow))
	tick := time.NewTicker(delayedEvery)
	defer tick.Stop()
	lastProgress := time.Now()
	for {
		var ticks <-chan time.Time
		if len(pending) < confirmWindow {
			ticks = tick.C
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case cf, ok := <-confirms:
			if !ok {
				return errors.New("channel closed")
			}
			s := pending[0]
			pending = pending[1:]
			rec.settle(s, cf.Ack, time.Now())
			lastProgress = time.Now()
		case <-ticks:
			if !rec.take() {
				select {
				case <-rec.done:
					if len(pending) == 0 {
						return nil
					}
				default:
				}
				continue
			}
			*seq++
			s, msg := delayedMessage(p, *seq)
			pctx, cancel := context.WithTimeout(ctx, confirmTimeout)
			err := ch.PublishWithContext(pctx, delayedExchange, delayedQueue(p), false, false, msg)
			cancel()
			if err != nil {
				// Perhaps written: recorded, never confirmed.
				rec.settle(s, false, time.Time{})
				return err
			}
			pending = append(pending, s)
		case <-time.After(time.Until(lastProgress.Add(confirmTimeout))):
			if len(pending) > 0 {
				return fmt.Errorf("no confirm for %v", confirmTimeout)
			}
			lastProgress = time.Now()
		}
	}
}

// consumeDelayed runs a consumer of publisher p's queue, starting on
// node first (never p's) and moving on when its connection fails.
func consumeDelayed(ctx context.Context, c *cluster, rec *delayedRecorder, p, first int) {
	for attempt := first; ctx.Err() == nil; attempt++ {
		n := c.nodes[attempt%len(c.nodes)]
		conn, ch, err := open(n)
		if err == nil {
			err = e2e.ConsumeAcking(ctx, ch, delayedQueue(p), prefetch, func(d amqp.Delivery) {
				mark, marked := e2e.HeaderInt(d.Headers, "x-delay")
				rec.delivered(delayedDelivery{id: d.MessageId, at: time.Now(), redelivered: d.Redelivered, mark: mark, marked: marked, node: n.id})
			})
			conn.Close()
		}
		if err != nil && ctx.Err() == nil {
			pause(ctx, 200*time.Millisecond)
		}
	}
}

func TestFaultDelayed(t *testing.T) {
	skipWithoutDocker(t)
	c := startCluster(t, "delayed")
	if err := c.withChannel(30*time.Second, func(ch *amqp.Channel) error {
		if err := ch.ExchangeDeclare(delayedExchange, "x-delayed-message", true, false, false, false,
			amqp.Table{"x-delayed-type": "direct"}); err != nil {
			return err
		}
		for p := range c.nodes {
			if _, err := ch.QueueDeclare(delayedQueue(p), true, false, false, false, nil); err != nil {
				return err
			}
			if err := ch.QueueBind(delayedQueue(p), delayedQueue(p), delayedExchange, false, nil); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("declare the delayed exchange and its queues: %v", err)
	}

	total := delayedTotal()
	rec := newDelayedRecorder(total)
	cctx, stopConsumers := context.WithCancel(context.Background())
	pctx, stopPublishers := context.WithCancel(context.Background())
	var pubs, cons sync.WaitGroup
	defer func() { stopPublishers(); stopConsumers(); pubs.Wait(); cons.Wait() }()
	// Two consumers a queue, on the two nodes other than its
	// publisher's: when the cluster declares one's node down, the
	// broker gives its messages to the other.
	for p := range c.nodes {
		for _, k := range []int{1, 2} {
			cons.Add(1)
			go func() { defer cons.Done(); consumeDelayed(cctx, c, rec, p, p+k) }()
		}
	}
	start := time.Now()
	for p := range c.nodes {
		pubs.Add(1)
		go func() { defer pubs.Done(); publishDelayed(pctx, c, rec, p) }()
	}
	// The faults come while the first messages wait (none is due before
	// a second has passed) and while more are published.
	if err := e2e.Eventually(30*time.Second, func() error {
		if n := rec.confirmedNow(); n < min(total/10, 1000) {
			return fmt.Errorf("%d confirmed", n)
		}
		return nil
	}); err != nil {
		t.Fatalf("publishers do not start: %v", err)
	}

	var fw faultWindows
	killed := c.leader()
	fw.killFrom = time.Now()
	c.kill(killed)
	time.Sleep(delayedDown) // the fault itself: a spell down
	c.start(killed)
	fw.killTo = time.Now()
	if len(c.notBack) == 0 {
		c.waitMembers()
	}
	frozenNode := -1
	if len(c.notBack) == 0 {
		frozenNode = c.leader()
		fw.freezeFrom = time.Now()
		c.freeze(frozenNode)
		time.Sleep(freezeFor) // the fault itself: a spell frozen
		c.thaw(frozenNode)
		fw.freezeTo = time.Now()
		c.comeBack(frozenNode)
	}
	for _, b := range c.notBack {
		t.Error(b)
	}

	// Every message is due at most delayMax after its publish.
	select {
	case <-rec.done:
	case <-time.After(2 * time.Minute):
		t.Errorf("%d of %d messages confirmed after 2 minutes", rec.confirmedNow(), total)
	}
	stopPublishers()
	pubs.Wait()
	publishEnd := time.Now()
	if err := e2e.Eventually(delayMax+90*time.Second, func() error {
		if n := rec.missing(); n > 0 {
			return fmt.Errorf("%d confirmed messages not yet received", n)
		}
		return nil
	}); err != nil {
		t.Errorf("drain: %v", err)
	}
	// What was received is acked and nothing more waits in the queues.
	if err := c.withChannel(30*time.Second, func(ch *amqp.Channel) error {
		for p := range c.nodes {
			q, err := ch.QueueDeclarePassive(delayedQueue(p), true, false, false, false, nil)
			if err != nil {
				return err
			}
			if q.Messages != 0 {
				return fmt.Errorf("%s holds %d messages after the drain", q.Name, q.Messages)
			}
		}
		return nil
	}); err != nil {
		t.Errorf("after the drain: %v", err)
	}
	stopConsumers()
	cons.Wait()
	if len(c.notBack) == 0 {
		c.waitMembers()
		if err := c.digestsAgree(60 * time.Second); err != nil {
			t.Errorf("state digests differ: %v", err)
		}
	}

	sent, got := rec.snapshot()
	rep, bad := delayedViolations("delayed-kill-freeze", sent, got, delayedLateBound, fw)
	rep.target = delayedLateP99
	rep.nodesBack = len(c.notBack) == 0
	for _, b := range bad {
		t.Error(b)
	}
	var tbl strings.Builder
	writeDelayedTable(&tbl, []delayedReport{rep})
	rel := func(at time.Time) time.Duration { return at.Sub(start).Round(100 * time.Millisecond) }
	frozenID := "none"
	if frozenNode >= 0 {
		frozenID = c.nodes[frozenNode].id
	}
	course := fmt.Sprintf("publishing from +0 (%s) to +%v; leader %s killed at +%v, back at +%v; leader %s frozen at +%v, thawed at +%v",
		start.UTC().Format("15:04:05.000"), rel(publishEnd), c.nodes[killed].id, rel(fw.killFrom), rel(fw.killTo), frozenID, rel(fw.freezeFrom), rel(fw.freezeTo))
	late := lateByDue(sent, got, start, time.Second)
	t.Logf("%s:\n%s", course, tbl.String())
	t.Logf("confirmed messages received more than 1 s late, by due time:\n%s", late)
	report := tbl.String()
	if rep.lateP99 > delayedLateP99/2 {
		// A lateness this far past the usual few hundred ms passes, and
		// a passing test's log is not kept: CI keeps this report, so
		// the run's timeline goes into it, for the cause to be read.
		report += fmt.Sprintf("%s: lateness p99 %v, past half its target\n%s\nreceived more than 1 s late, by due time:\n%s\nthe fault's course:\n%s\n",
			rep.scenario, rep.lateP99, course, late, strings.Join(faultCourse(c.nodeLogs()), "\n"))
	}
	appendReport(t, report)
}

// lateByDue counts the confirmed messages whose first receipt came more
// than over after their due time, by the second (from start) they were
// due in, with the worst of each second and the nodes that delivered them:
// where in the run the lateness lies.
func lateByDue(sent map[string]*delayedSent, got []delayedDelivery, start time.Time, over time.Duration) string {
	first := map[string]delayedDelivery{}
	for _, d := range got {
		if f, ok := first[d.id]; !ok || d.at.Before(f.at) {
			first[d.id] = d
		}
	}
	type bucket struct {
		n     int
		worst time.Duration
		nodes map[string]int
	}
	byS := map[int]*bucket{}
	for id, s := range sent {
		d, ok := first[id]
		if !ok || s.confirmed.IsZero() {
			continue
		}
		due := s.at.Add(s.delay)
		if l := d.at.Sub(due); l > over {
			k := int(due.Sub(start) / time.Second)
			b := byS[k]
			if b == nil {
				b = &bucket{nodes: map[string]int{}}
				byS[k] = b
			}
			b.n++
			b.worst = max(b.worst, l)
			b.nodes[d.node]++
		}
	}
	keys := make([]int, 0, len(byS))
	for k := range byS {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  due +%ds: %d, worst %v, received through %v\n", k, byS[k].n, byS[k].worst.Round(time.Millisecond), byS[k].nodes)
	}
	return b.String()
}

// confirmedNow is how many publishes are confirmed so far.
func (r *delayedRecorder) confirmedNow() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.confirmed
}
