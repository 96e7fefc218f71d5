package amqp

import (
	"context"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// A consumer's credit that follows its round trip.
//
// The look-ahead of window.go is a fixed multiple of the prefetch, and an
// ack returns credit only once it has gone through the log: a consumer
// takes at most its credit per round trip of its acks. Under load that
// round trip is what a publish's commit takes, and it grows with the
// publishers (50-90 ms with four, about 300 ms with sixteen on the
// development machine), so a fixed credit let the publishers outrun one
// consumer that could have kept pace. From protocol level 14 the node
// sets the credit through the log (fsm Credit) to what the consumer
// takes over a round trip:
//
//   - it grows when the consumer was starved over a period: an ack left
//     the client room and the node held nothing to write, while the log
//     still had ready messages in the queue (so the log held them back for
//     want of credit, not for want of messages). At once to what covers
//     the round trip (stepFor), at least fourfold;
//   - it shrinks back towards the Consume's credit when the node held
//     more than half its look-ahead all through plentyPeriods periods in
//     a row: a consumer slower than the queue's supply holds only what it
//     uses. Slowly: the round trip has spikes (a commit's p99 under load
//     is several times its median), and a credit cut in a quiet second
//     grows back only after a commit, in the spike.
//
// The client never gets more than its prefetch: the node writes the rest
// as acks arrive (window.go), so the client's credit comes back when its
// ack is read here while the settlement is still decided in the log, once.
// Only a consumer with look-ahead is tuned, and only while it acks (the
// tuning runs on the ack path); a consumer that goes silent keeps its
// credit, and the log gives it no more than its prefetch after
// fsm.LookaheadIdleMs anyway.

const (
	// creditPeriodMs is how often, at most, a consumer's credit is
	// reconsidered: long enough to see a round trip of acks.
	creditPeriodMs = 200
	// plentyPeriods is how many periods in a row a consumer must hold
	// more than half its grown look-ahead before it gives some back.
	plentyPeriods = 25
	// maxGrownLookahead bounds what a consumer may be assigned beyond its
	// prefetch once its credit grew (fsm.MaxCredit is the log's bound).
	maxGrownLookahead = 30_000
	// maxHeldBytes bounds the bodies a consumer's grown credit may make
	// its node hold, judged by the sizes of what it was assigned.
	maxHeldBytes = 64 << 20
)

// creditCtl is a window's credit tuning. The ledger owns it (ch.mu).
type creditCtl struct {
	base   uint32 // the credit its Consume registered, the least it has
	credit uint32 // the credit the log holds, as this node last set it
	asking bool   // a Credit is on its way to the log
	// Over the current period: whether it starved, the least it held,
	// and the deliveries and body bytes it was assigned (count and bytes
	// from its Consume on in the first period: they bound the sizes;
	// taken from the period's start: it is the rate).
	since   int64
	starved bool
	minHeld int
	count   uint64
	bytes   uint64
	taken   uint64
	// ready is the queue's ready messages when the log was last asked
	// (0 before the first ask: what is ready then piled up in the first
	// period, or waited for it, and is to be taken either way).
	ready uint64
	// plenty counts the periods in a row that ended with more than half
	// the look-ahead held all through.
	plenty int
}

// creditAsk is one consumer's state at the end of a period, for the
// channel to decide its credit with the log's view (nextCredit).
type creditAsk struct {
	consumer string
	prefetch uint32
	ctl      creditCtl
}

// assigned counts a delivery assigned to the window's consumer.
func (c *creditCtl) assigned(d *fsm.Delivery) {
	c.count++
	c.taken++
	c.bytes += uint64(max(int(d.BodyRef.Size), len(d.Body)))
}

// tuneDue returns, once creditPeriodMs passed since the window's last
// period began, its consumer's state for nextCredit and starts a new
// period. Nothing while a Credit is on its way. It runs on every ack, so
// it looks at the windows only once one may be due (tuneAt).
func (l *ledger) tuneDue(a *actions, now int64) {
	if now < l.tuneAt {
		return
	}
	l.tuneAt = math.MaxInt64
	for _, tag := range slices.Sorted(maps.Keys(l.windows)) {
		w := l.windows[tag]
		c := &w.ctl
		if c.base == 0 || c.asking || !l.consumers[tag] {
			continue
		}
		if c.since == 0 {
			c.since, c.minHeld, c.taken = now, len(w.held), 0
		}
		if now-c.since < creditPeriodMs {
			l.tuneAt = min(l.tuneAt, c.since+creditPeriodMs)
			continue
		}
		if !c.starved && c.minHeld > 0 && uint32(c.minHeld) > (c.credit-w.prefetch)/2 {
			c.plenty++
		} else {
			c.plenty = 0
		}
		a.tune = append(a.tune, creditAsk{consumer: tag, prefetch: w.prefetch, ctl: *c})
		c.asking = true // credited makes it due again
		c.since, c.starved, c.minHeld, c.count, c.bytes, c.taken = now, false, len(w.held), 0, 0, 0
	}
}

// credited ends a consumer's ask: the log holds credit now (when ok), and
// its queue had ready messages when asked.
func (l *ledger) credited(tag string, credit uint32, ok bool, ready uint64) {
	w := l.windows[tag]
	if w == nil {
		return
	}
	w.ctl.asking = false
	w.ctl.ready = ready
	l.tuneAt = min(l.tuneAt, w.ctl.since+creditPeriodMs)
	if ok {
		if credit < w.ctl.credit {
			w.ctl.plenty = 0
		}
		w.ctl.credit = credit
	}
}

// nextCredit is the credit a consumer should have after a period, and
// whether it differs from what the log holds. ready is how many ready
// messages the log had in the consumer's queue when the period ended.
func nextCredit(k creditAsk, ready uint64) (uint32, bool) {
	c := k.ctl
	cur := c.credit
	limit := k.prefetch + maxGrownLookahead
	if c.count > 0 && c.bytes > 0 {
		// The bodies it was assigned, on average, bound what it may hold.
		byBytes := uint64(maxHeldBytes) / max(c.bytes/c.count, 1)
		limit = uint32(min(uint64(limit), uint64(k.prefetch)+byBytes))
	}
	limit = min(max(limit, c.base), fsm.MaxCredit)
	switch {
	case c.starved && ready > 0 && cur < limit:
		return uint32(min(stepFor(cur, c.taken, c.ready, ready), uint64(limit))), true
	case c.plenty >= plentyPeriods && cur > c.base:
		// It held more than half its look-ahead for plentyPeriods: give
		// back half of what it never used in the last one.
		return max(cur-min(uint32(c.minHeld)/2, cur), c.base), true
	case cur > limit:
		return limit, true
	}
	return cur, false
}

// stepFor is the credit of a consumer starved at credit cur over a period
// in which it was assigned taken deliveries while its queue's ready
// messages went from before to after: twice what covers the round trip
// of its acks at the rate its queue was supplied, and never less than
// four times cur.
//
// A starved consumer held its whole credit in the log all through, so
// its round trip is cur / (taken per period) (Little's law): the commit
// round trip measured by what it was given, with no clock. To keep pace
// with a supply of taken + after - before per period it needs that rate
// times the round trip, which is cur x (taken + after - before) / taken.
// Twice that takes what piled up while it fell behind as fast as it
// piles up, and covers a round trip that grows as the consumer takes its
// share of the commits. Each step waits for a commit: a fixed fourfold
// step needed two or three of them, seconds under load, to catch up
// with sixteen publishers. Nothing taken (no rate to measure) is the
// fourfold step.
func stepFor(cur uint32, taken, before, after uint64) uint64 {
	step := 4 * uint64(cur)
	if taken == 0 || after <= before {
		return step
	}
	// Bounded well before it could overflow: the caller caps it anyway.
	supply := min(taken+after-before, math.MaxUint32)
	return max(step, 2*uint64(cur)*supply/taken)
}

// askCredit decides a consumer's credit after a period, with the log's
// view of its queue, and sets it through the log. It runs on a goroutine
// of its own: the ack path that found the period over holds ch.mu.
func (ch *channel) askCredit(k creditAsk) {
	b := ch.c.srv.node()
	ref := &proto.ConsumerRef{Channel: ch.ref(), Tag: k.consumer}
	credit, ok, ready := k.ctl.credit, false, k.ctl.ready
	if load, found := b.ConsumerLoad(ref); found && load.Level >= fsm.CreditLevel {
		ready = load.Ready
		if next, change := nextCredit(k, load.Ready); change {
			ctx, cancel := context.WithTimeout(ch.c.ctx, 10*time.Second)
			r, err := b.Submit(ctx, &proto.Command{Cmd: &proto.Command_Credit{Credit: &proto.Credit{Consumer: ref, Credit: next}}})
			cancel()
			credit, ok = next, err == nil && r.GetCode() == 0
			switch {
			case ok && next > k.ctl.credit:
				ch.c.srv.counts.creditRaised.Add(1)
			case ok:
				ch.c.srv.counts.creditLowered.Add(1)
			}
		}
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.led.credited(k.consumer, credit, ok, ready)
}
