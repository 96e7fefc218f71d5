package main

import (
	"context"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The delayed mode publishes messages with an x-delay header through an
// x-delayed-message exchange (x-delayed-type direct) bound to the queue,
// and a consumer on the last URL measures how late each arrives.
//
// A message's body starts with its send time, its id and its delay
// (delayedBodyMin bytes). Its due time is its send time truncated to the
// millisecond plus its delay: log time counts whole milliseconds and the
// leader's stamp comes after the send, so a broker that releases it on
// time never delivers it before that instant. Lateness is arrival minus
// due time; it includes the publish's own latency (the stamp is taken when
// the leader proposes the publish), so it is an upper bound. Arrival minus
// the confirm's arrival plus the delay is a lower bound (the stamp came
// before the confirm left the broker), 0 where negative: the release's
// own lateness at the consumer lies between the two, the publish's
// latency under a saturating load being what sets them apart. A broker
// that stamps what it takes in (timestamp_in_ms: raftmq's
// --set-header-timestamp, RabbitMQ's set_header_timestamp interceptor)
// gives a third count, arrival minus (that stamp + delay): the wait
// before the broker had the message left out, its wait inside the broker
// for the log kept in.
//
// Delays are spread uniformly over [-delay-min, -delay-min + -delay-spread],
// or, with -delay-same, computed per message so that every message is due
// at one instant (a millisecond), -delay-same after the start.
//
// -phase publish saves what the broker confirmed (ids and due times) in
// -expect; -phase consume reads it and consumes, so that every node can be
// restarted in between.

// delayedBodyMin is the size of a delayed message's header in its body.
const delayedBodyMin = 24

// putDelayed writes a message's send time, id and delay (ms) into body.
func putDelayed(body []byte, id uint64, sent time.Time, delayMs int64) {
	binary.BigEndian.PutUint64(body, uint64(sent.UnixNano()))
	binary.BigEndian.PutUint64(body[8:], id)
	binary.BigEndian.PutUint64(body[16:], uint64(delayMs))
}

// readDelayed reads what putDelayed wrote.
func readDelayed(body []byte) (id uint64, sent time.Time, delayMs int64, ok bool) {
	if len(body) < delayedBodyMin {
		return 0, time.Time{}, 0, false
	}
	return binary.BigEndian.Uint64(body[8:]), time.Unix(0, int64(binary.BigEndian.Uint64(body))),
		int64(binary.BigEndian.Uint64(body[16:])), true
}

// dueMs is when a message sent at sent with delayMs is due (unix ms).
func dueMs(sent time.Time, delayMs int64) int64 { return sent.UnixMilli() + delayMs }

// spreadDelay is the delay (ms) of message id: lo plus a fraction of
// spread that the id's golden-ratio multiple gives, so that delays cover
// the window uniformly in any prefix of the ids, without randomness. At
// least 1 ms: an x-delay of 0 routes at once.
func spreadDelay(id uint64, lo, spread time.Duration) int64 {
	frac := math.Mod(float64(id)*0.6180339887498949, 1)
	return max(1, (lo + time.Duration(frac*float64(spread))).Milliseconds())
}

// sameDelay is the delay (ms) that makes a message sent at now due at
// instantMs; at least 1 ms (the instant has passed: due as soon as can be).
func sameDelay(now time.Time, instantMs int64) int64 { return max(1, instantMs-now.UnixMilli()) }

// Message states in a delayTracker.
const (
	stNone uint8 = iota
	stPublished
	stConfirmed
	stNacked
)

// delayTracker follows every message of a delayed run by id: its due
// time and publish state, and what arrived when.
type delayTracker struct {
	mu  sync.Mutex
	due []int64 // unix ms
	// confirmedAt is when each confirmed message's confirm came (unix
	// µs), 0 until it came.
	confirmedAt []int64
	state       []uint8
	got         []uint8 // arrivals, saturating
	confirms    bool    // expected means confirmed (else published)
	lateness    *latencies
	// quiet is the lateness of the messages due after publishing ended
	// (pubEndMs), when releases no longer share the machine with the
	// publishers' load.
	quiet *latencies
	// lower and lowerQuiet are lateness and quiet's lower bounds: arrival
	// minus (confirmedAt + delay).
	lower, lowerQuiet *latencies
	// fromRecv and fromRecvQuiet are lateness and quiet counted from the
	// time the broker took the message in, where it says so (a
	// timestamp_in_ms header: raftmq's --set-header-timestamp, RabbitMQ's
	// message_interceptors.incoming.set_header_timestamp): arrival minus
	// (that time + delay), the publisher's own wait left out.
	fromRecv, fromRecvQuiet *latencies
	pubEndMs                int64
	expected                int64 // messages in the expected state
	uniq                    int64 // first arrivals
	// uniqWanted are the first arrivals of expected messages (others
	// are published ones the broker nacked or did not confirm, yet held).
	uniqWanted int64
	dups       int64 // arrivals after the first
	early      int64 // arrivals before their due time
	unknown    int64 // bodies that name no message of the run
	// redelivered counts arrivals after the first marked redelivered;
	// reconnects the consumer's new connections.
	redelivered, reconnects int64
	maxEarly                time.Duration
	last                    time.Time // the last first arrival
	instantMs               int64     // -delay-same's instant (0: none)
	// slow, when set (-slow), prints each first arrival at least this
	// late to slowOut, with its time: a late cohort lines up with what
	// the nodes logged then (a snapshot, an election).
	slow    time.Duration
	slowOut io.Writer
}

func newDelayTracker(n int, confirms bool) *delayTracker {
	return &delayTracker{due: make([]int64, n), confirmedAt: make([]int64, n), state: make([]uint8, n), got: make([]uint8, n), confirms: confirms,
		lateness: newLatencies(max(n, 1)), quiet: newLatencies(max(n, 1)), lower: newLatencies(max(n, 1)), lowerQuiet: newLatencies(max(n, 1)),
		fromRecv: newLatencies(max(n, 1)), fromRecvQuiet: newLatencies(max(n, 1))}
}

// publishingEnded marks the end of publishing: messages due after it
// are also summed apart.
func (t *delayTracker) publishingEnded(at time.Time) {
	t.mu.Lock()
	t.pubEndMs = at.UnixMilli()
	t.mu.Unlock()
}

func (t *delayTracker) published(id int, due int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.due[id], t.state[id] = due, stPublished
	if !t.confirms {
		t.expected++
	}
}

// confirmed records the broker's answer to message id's publish, come
// at at.
func (t *delayTracker) confirmed(id int, ack bool, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state[id] != stPublished {
		return
	}
	if ack {
		t.state[id] = stConfirmed
		t.confirmedAt[id] = at.UnixMicro()
		if t.confirms {
			t.expected++
			if t.got[id] > 0 { // released before its confirm came
				t.uniqWanted++
			}
		}
	} else {
		t.state[id] = stNacked
	}
}

// arrive records a delivery of body at now; a redelivered one that came
// before is not a duplicate (the consumer's connection was lost before
// its ack). receivedMs is the time the broker took the message in (its
// timestamp_in_ms header, unix ms), 0 when it does not say.
func (t *delayTracker) arrive(body []byte, now time.Time, redelivered bool, receivedMs int64) {
	id, sent, delay, ok := readDelayed(body)
	t.mu.Lock()
	defer t.mu.Unlock()
	if !ok || id >= uint64(len(t.got)) {
		t.unknown++
		return
	}
	if t.got[id] < math.MaxUint8 {
		t.got[id]++
	}
	if t.got[id] > 1 {
		if redelivered {
			t.redelivered++
		} else {
			t.dups++
		}
		return
	}
	t.uniq++
	if t.wanted(int(id)) {
		t.uniqWanted++
	}
	t.last = now
	due := dueMs(sent, delay)
	late := now.Sub(time.UnixMilli(due))
	if late < 0 {
		t.early++
		t.maxEarly = max(t.maxEarly, -late)
	}
	t.lateness.add(late)
	if t.slow > 0 && late >= t.slow {
		fmt.Fprintf(t.slowOut, "late %.1f ms: message %d arrived %s\n", float64(late.Microseconds())/1000, id, now.UTC().Format("15:04:05.000"))
	}
	quiet := t.pubEndMs > 0 && due > t.pubEndMs
	if quiet {
		t.quiet.add(late)
	}
	if receivedMs > 0 {
		fromReceived := now.Sub(time.UnixMilli(receivedMs).Add(time.Duration(delay) * time.Millisecond))
		t.fromRecv.add(fromReceived)
		if quiet {
			t.fromRecvQuiet.add(fromReceived)
		}
	}
	if t.confirms && t.confirmedAt != nil {
		// A release that came before its confirm (the confirm still on
		// its way) has no lower bound but 0.
		low := time.Duration(0)
		if c := t.confirmedAt[id]; c > 0 {
			low = max(now.Sub(time.UnixMicro(c).Add(time.Duration(delay)*time.Millisecond)), 0)
		}
		t.lower.add(low)
		if quiet {
			t.lowerQuiet.add(low)
		}
	}
}

// done reports whether every expected message arrived at least once.
func (t *delayTracker) done() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.uniqWanted >= t.expected
}

// lastDue is the latest due time of the expected messages (unix ms).
func (t *delayTracker) lastDue() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var last int64
	for i, d := range t.due {
		if t.wanted(i) {
			last = max(last, d)
		}
	}
	return last
}

// wanted reports whether message i is expected to arrive. Locks: t.mu.
func (t *delayTracker) wanted(i int) bool {
	return t.state[i] == stConfirmed || (!t.confirms && t.state[i] == stPublished)
}

// delayedReport is the delayed mode's part of the report.
type delayedReport struct {
	// AcceptedPerS is confirmed messages per second of publishing.
	AcceptedPerS float64 `json:"accepted_per_s"`
	Expected     int64   `json:"expected"`
	Received     int64   `json:"received"`
	// ReceivedUnexpected are messages that arrived though the broker
	// nacked them or never confirmed them (as a leader change may).
	ReceivedUnexpected int64 `json:"received_unexpected"`
	// Lateness is arrival minus due time over the first arrival of each.
	Lateness summary `json:"lateness"`
	// LatenessDueAfterPublishing is Lateness over the messages due after
	// publishing ended, away from the publishers' load (empty with -phase).
	LatenessDueAfterPublishing summary `json:"lateness_due_after_publishing"`
	// LatenessFromConfirm and LatenessFromConfirmDueAfterPublishing are
	// the lower bounds of the two: arrival minus (confirm + delay), 0
	// where negative (empty with -phase consume).
	LatenessFromConfirm                   summary `json:"lateness_from_confirm"`
	LatenessFromConfirmDueAfterPublishing summary `json:"lateness_from_confirm_due_after_publishing"`
	// LatenessFromReceived and LatenessFromReceivedDueAfterPublishing
	// count from the time the broker took each message in (its
	// timestamp_in_ms header), over the messages that carry one: arrival
	// minus (that time + delay). Absent when none did.
	LatenessFromReceived                   *summary `json:"lateness_from_received,omitempty"`
	LatenessFromReceivedDueAfterPublishing *summary `json:"lateness_from_received_due_after_publishing,omitempty"`
	Early                                  int64    `json:"early"`
	MaxEarlyMs                             float64  `json:"max_early_ms"`
	Duplicates                             int64    `json:"duplicates"`
	// Redelivered are arrivals after the first that the broker marked
	// redelivered (their ack was lost with a connection); Reconnects the
	// consumer's connections after the first.
	Redelivered int64 `json:"redelivered"`
	Reconnects  int64 `json:"consumer_reconnects"`
	// Missing are expected messages that never arrived.
	Missing int64 `json:"missing"`
	Unknown int64 `json:"unknown,omitempty"`
	// BurstDeliveredWithinMs is, with -delay-same, the time from the due
	// instant to the last first arrival.
	BurstDeliveredWithinMs *float64 `json:"burst_delivered_within_ms,omitempty"`
	DueInstantMs           int64    `json:"due_instant_ms,omitempty"`
	// RSSAnonKiB are the RssAnon of -pids before and after publishing.
	RSSAnonBeforeKiB []int64 `json:"rss_anon_before_kib,omitempty"`
	RSSAnonAfterKiB  []int64 `json:"rss_anon_after_kib,omitempty"`
}

// rssAnon reads the RssAnon (KiB) of each process; -1 where unreadable.
func rssAnon(pids []int) []int64 {
	var out []int64
	for _, p := range pids {
		out = append(out, -1)
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/status")
		if err != nil {
			continue
		}
		out[len(out)-1] = parseRSSAnon(string(b))
	}
	return out
}

// parseRSSAnon returns the RssAnon line's KiB of a /proc/PID/status text.
func parseRSSAnon(status string) int64 {
	for _, line := range strings.Split(status, "\n") {
		if rest, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			if n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

func (t *delayTracker) report(accepted float64) *delayedReport {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := &delayedReport{AcceptedPerS: accepted, Expected: t.expected, Received: t.uniqWanted, ReceivedUnexpected: t.uniq - t.uniqWanted, Early: t.early,
		MaxEarlyMs: ms(t.maxEarly), Duplicates: t.dups, Redelivered: t.redelivered, Reconnects: t.reconnects, Unknown: t.unknown, DueInstantMs: t.instantMs}
	for i := range t.got {
		if t.wanted(i) && t.got[i] == 0 {
			r.Missing++
		}
	}
	r.Lateness = t.lateness.summary()
	r.LatenessDueAfterPublishing = t.quiet.summary()
	r.LatenessFromConfirm = t.lower.summary()
	r.LatenessFromConfirmDueAfterPublishing = t.lowerQuiet.summary()
	if s := t.fromRecv.summary(); s.Count > 0 {
		q := t.fromRecvQuiet.summary()
		r.LatenessFromReceived, r.LatenessFromReceivedDueAfterPublishing = &s, &q
	}
	if t.instantMs > 0 && t.uniq > 0 {
		w := ms(t.last.Sub(time.UnixMilli(t.instantMs)))
		r.BurstDeliveredWithinMs = &w
	}
	return r
}

// expectFile is what -phase publish leaves for -phase consume.
type expectFile struct {
	Exchange, Queue string
	Confirms        bool
	InstantMs       int64
	AcceptedPerS    float64
	Due             []int64
	State           []uint8
}

func (t *delayTracker) save(path, exchange, queue string, accepted float64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	t.mu.Lock()
	err = gob.NewEncoder(f).Encode(expectFile{Exchange: exchange, Queue: queue, Confirms: t.confirms, InstantMs: t.instantMs,
		AcceptedPerS: accepted, Due: t.due, State: t.state})
	t.mu.Unlock()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func loadTracker(path string) (*delayTracker, *expectFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var e expectFile
	if err := gob.NewDecoder(f).Decode(&e); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(e.Due) != len(e.State) {
		return nil, nil, fmt.Errorf("%s: %d due times for %d states", path, len(e.Due), len(e.State))
	}
	t := newDelayTracker(len(e.Due), e.Confirms)
	t.due, t.state, t.instantMs = e.Due, e.State, e.InstantMs
	t.confirmedAt = nil // the confirms' times stayed with the publishing run
	for i := range t.state {
		if t.wanted(i) {
			t.expected++
		}
	}
	return t, &e, nil
}

// delayShaper shapes the messages of one producer of a delayed run:
// message n is the run's message base+n.
type delayShaper struct {
	o        *options
	exchange string
	base     int
	t        *delayTracker
}

func (s *delayShaper) shape(n int, now time.Time, body []byte) (string, string, amqp.Table) {
	id := s.base + n
	var delay int64
	if s.t.instantMs > 0 {
		delay = sameDelay(now, s.t.instantMs)
	} else {
		delay = spreadDelay(uint64(id), s.o.DelayMin, s.o.DelaySpread)
	}
	putDelayed(body, uint64(id), now, delay)
	s.t.published(id, dueMs(now, delay))
	return s.exchange, s.o.Queue, amqp.Table{"x-delay": delay}
}

func (s *delayShaper) confirmed(n int, ack bool) { s.t.confirmed(s.base+n, ack, time.Now()) }

// checkDelayed checks and completes the options of the delayed mode.
func checkDelayed(o *options, durationSet bool) error {
	switch {
	case o.Size < delayedBodyMin:
		return fmt.Errorf("-size must be at least %d in delayed mode", delayedBodyMin)
	case o.Phase != "" && o.Phase != "publish" && o.Phase != "consume":
		return fmt.Errorf("-phase must be publish or consume, got %q", o.Phase)
	case o.Phase != "" && o.Expect == "":
		return errors.New("-phase needs -expect, the file of expected messages")
	case o.DelayMin < 0 || o.DelaySpread < 0 || o.DelaySame < 0:
		return errors.New("delays must not be negative")
	case o.DelaySame == 0 && o.DelayMin+o.DelaySpread < time.Millisecond:
		return errors.New("-delay-min plus -delay-spread must be at least 1ms")
	case o.Phase != "consume" && o.Producers == 0:
		return errors.New("delayed mode needs a producer")
	}
	if o.Count == 0 {
		o.Count = 10000
	}
	if !durationSet {
		o.Duration = 24 * time.Hour // -count ends publishing
	}
	if o.Exchange == "" {
		o.Exchange = o.Queue + "-dx"
	}
	return nil
}

// runDelayed runs the delayed mode, or one of its phases.
func runDelayed(ctx context.Context, o *options, out io.Writer) (*report, error) {
	var (
		t        *delayTracker
		accepted float64
	)
	if o.Phase == "consume" {
		var e *expectFile
		var err error
		if t, e, err = loadTracker(o.Expect); err != nil {
			return nil, err
		}
		o.Exchange, o.Queue, accepted = e.Exchange, e.Queue, e.AcceptedPerS
	} else {
		if err := declareDelayed(o); err != nil {
			return nil, err
		}
		t = newDelayTracker(o.Producers*o.Count, o.Confirm > 0)
		if o.DelaySame > 0 {
			t.instantMs = time.Now().Add(o.DelaySame).UnixMilli()
		}
	}
	t.slow, t.slowOut = o.Slow, out

	errc := make(chan error, 1+o.Producers)
	consCtx, stopConsumer := context.WithCancel(ctx)
	defer stopConsumer()
	var consWG sync.WaitGroup
	if o.Phase != "publish" {
		ready := make(chan struct{})
		consWG.Add(1)
		go func() {
			defer consWG.Done()
			if err := consumeDelayed(consCtx, o.URIs[len(o.URIs)-1], o, t, ready); err != nil && consCtx.Err() == nil {
				errc <- fmt.Errorf("consumer: %w", err)
			}
		}()
		select {
		case <-ready:
		case err := <-errc:
			return nil, err
		}
	}
	defer consWG.Wait()

	rep := &report{Mode: o.Mode}
	rssBefore := rssAnon(o.PIDs)
	start := time.Now()
	if o.Phase != "consume" {
		var c counters
		confirmLat := newLatencies(o.Producers * o.Count)
		pubCtx, stopPublishing := context.WithTimeout(ctx, o.Duration)
		defer stopPublishing()
		var wg sync.WaitGroup
		var failed atomic.Int32
		for i := 0; i < o.Producers; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				sh := &delayShaper{o: o, exchange: o.Exchange, base: i * o.Count, t: t}
				// A producer that fails stops; the others go on, and
				// what it had confirmed is still expected.
				if err := produce(pubCtx, o.URIs[i%len(o.URIs)], o, &c, confirmLat, sh); err != nil && pubCtx.Err() == nil {
					fmt.Fprintf(out, "producer %d stopped: %v\n", i, err)
					failed.Add(1)
				}
			}(i)
		}
		pubDone := make(chan struct{})
		go func() { wg.Wait(); close(pubDone) }()
		if err := progress(ctx, o, out, start, pubDone, errc, func() string {
			return fmt.Sprintf("published %d  confirmed %d  received %d", c.published.Load(), c.confirmed.Load(), t.received())
		}); err != nil {
			return nil, err
		}
		t.publishingEnded(time.Now())
		secs := time.Since(start).Seconds()
		accepted = float64(c.confirmed.Load()) / secs
		rep.Seconds, rep.Published, rep.Confirmed, rep.Nacked = secs, c.published.Load(), c.confirmed.Load(), c.nacked.Load()
		rep.PublishRate, rep.ConfirmRate, rep.ConfirmLatency = float64(c.published.Load())/secs, accepted, confirmLat.summary()
		if int(failed.Load()) == o.Producers {
			return nil, errors.New("every producer failed")
		}
		rssAfter := rssAnon(o.PIDs)
		if t.instantMs > 0 && time.Now().UnixMilli() > t.instantMs {
			fmt.Fprintf(out, "publishing ended after the due instant: raise -delay-same\n")
		}
		if o.Phase == "publish" {
			if err := t.save(o.Expect, o.Exchange, o.Queue, accepted); err != nil {
				return nil, err
			}
			rep.Delayed = t.report(accepted)
			rep.Delayed.RSSAnonBeforeKiB, rep.Delayed.RSSAnonAfterKiB = rssBefore, rssAfter
			return rep, nil
		}
		rep.Delayed = &delayedReport{RSSAnonBeforeKiB: rssBefore, RSSAnonAfterKiB: rssAfter}
	}

	// Wait for every expected message, until the last due time plus -grace;
	// then -linger more for duplicates.
	deadline := time.UnixMilli(t.lastDue()).Add(o.Grace)
	fmt.Fprintf(out, "waiting for %d messages, the last due in %.1fs\n", t.expected, time.Until(deadline.Add(-o.Grace)).Seconds())
	arrived := make(chan struct{})
	go func() {
		defer close(arrived)
		for !t.done() && time.Now().Before(deadline) && consCtx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		if t.done() {
			time.Sleep(o.Linger)
		}
	}()
	// An interrupt ends the wait with a report of what arrived so far.
	if err := progress(ctx, o, out, start, arrived, errc, func() string {
		return fmt.Sprintf("received %d of %d", t.received(), t.expected)
	}); err != nil && ctx.Err() == nil {
		return nil, err
	}
	stopConsumer()
	rss := rep.Delayed
	rep.Delayed = t.report(accepted)
	if rss != nil {
		rep.Delayed.RSSAnonBeforeKiB, rep.Delayed.RSSAnonAfterKiB = rss.RSSAnonBeforeKiB, rss.RSSAnonAfterKiB
	}
	if rep.Seconds == 0 {
		rep.Seconds = time.Since(start).Seconds()
	}
	return rep, nil
}

func (t *delayTracker) reconnected() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reconnects++
}

func (t *delayTracker) received() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.uniqWanted
}

// progress prints line() every -interval until done closes; an error on
// errc or the end of ctx ends it.
func progress(ctx context.Context, o *options, out io.Writer, start time.Time, done <-chan struct{}, errc <-chan error, line func() string) error {
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	for {
		select {
		case now := <-tick.C:
			fmt.Fprintf(out, "%6.1fs  %s\n", now.Sub(start).Seconds(), line())
		case <-done:
			return nil
		case err := <-errc:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// declareDelayed declares the delayed exchange and the queue, binds them
// and empties the queue.
func declareDelayed(o *options) error {
	conn, err := dial(o.URIs[0])
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.ExchangeDeclare(o.Exchange, "x-delayed-message", true, false, false, false, amqp.Table{"x-delayed-type": "direct"}); err != nil {
		return fmt.Errorf("declare %s: %w", o.Exchange, err)
	}
	if _, err := ch.QueueDeclare(o.Queue, true, false, false, false, o.QueueArgs); err != nil {
		return fmt.Errorf("declare %s: %w", o.Queue, err)
	}
	if err := ch.QueueBind(o.Queue, o.Queue, o.Exchange, false, nil); err != nil {
		return err
	}
	_, err = ch.QueuePurge(o.Queue, false)
	return err
}

// consumeDelayed consumes o.Queue on uri into t, connecting again when
// the connection is lost (a node that loses the majority closes its
// clients): what was delivered and not acked comes again, marked
// redelivered, and is not counted as a duplicate.
// The first connection is tried for up to a minute (nodes just
// restarted may not have a majority yet).
func consumeDelayed(ctx context.Context, uri string, o *options, t *delayTracker, ready chan struct{}) error {
	giveUp := time.Now().Add(time.Minute)
	for {
		err := consumeDelayedOnce(ctx, uri, o, t, ready)
		if ctx.Err() != nil {
			return nil
		}
		select {
		case <-ready:
			t.reconnected()
		default:
			if time.Now().After(giveUp) {
				return err // no first connection
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func consumeDelayedOnce(ctx context.Context, uri string, o *options, t *delayTracker, ready chan struct{}) error {
	conn, ds, err := openConsumer(uri, o)
	if err != nil {
		return err
	}
	defer conn.Close()
	select {
	case <-ready:
	default:
		close(ready)
	}
	return receive(ctx, ds, o.AutoAck, func(d amqp.Delivery) {
		received, _ := d.Headers["timestamp_in_ms"].(int64)
		t.arrive(d.Body, time.Now(), d.Redelivered, received)
	})
}
