package amqp

import (
	"math/rand/v2"
	"testing"

	"github.com/raftmq/raftmq/amqp/wire"
)

// tuned returns what a ledger asks to tune after ack m at now.
func tuned(t *testing.T, l *ledger, m wire.Method, now int64) []creditAsk {
	t.Helper()
	_, _, a, e := l.ack(m, false, now)
	if e != nil {
		t.Fatalf("ack: %v", e)
	}
	return a.tune
}

// A consumer whose client had room while its node held nothing, with
// messages ready in the log, is credit-bound: its credit grows fourfold. Without
// ready messages it is as fast as its queue's supply and keeps its credit.
func TestCredit_GrowsWhenStarvedWithMessagesWaiting(t *testing.T) {
	l := started(t, nil, []string{"a"}) // prefetch 2, credit 3
	feed(l, t0, dl("a", 1, 0), dl("a", 2, 0))
	if k := tuned(t, l, ack(1, false), t0); len(k) != 0 {
		t.Fatalf("asked %v at the start of the first period", k)
	}
	k := tuned(t, l, ack(2, false), t0+creditPeriodMs)
	if len(k) != 1 || k[0].consumer != "a" || !k[0].ctl.starved {
		t.Fatalf("after a period with nothing held asked %+v, want a starved ask for a", k)
	}
	if c, change := nextCredit(k[0], 1); !change || c != 12 {
		t.Fatalf("starved with messages waiting: credit %d (change %v), want 12", c, change)
	}
	if c, change := nextCredit(k[0], 0); change || c != 3 {
		t.Fatalf("starved with nothing waiting: credit %d (change %v), want 3 unchanged", c, change)
	}
	// One ask at a time: nothing more until the log answered.
	feed(l, t0, dl("a", 3, 0))
	if k := tuned(t, l, ack(3, false), t0+3*creditPeriodMs); len(k) != 0 {
		t.Fatalf("asked %v while an ask is on its way", k)
	}
	l.credited("a", 6, true, 1)
	if w := l.windows["a"]; w.ctl.credit != 6 || w.ctl.asking {
		t.Fatalf("after the log's answer the window has credit %d, asking %v; want 6, false", w.ctl.credit, w.ctl.asking)
	}
}

// A consumer that held more than half its grown look-ahead for
// plentyPeriods periods in a row gives half of it back, never below its
// Consume's credit; the bodies it was assigned bound how far it grows.
func TestCredit_ShrinksAndIsBounded(t *testing.T) {
	// Prefetch 2, credit 40: the log keeps 38 held as the client acks.
	l := started(t, nil, []string{"a"})
	l.credited("a", 40, true, 0)
	now := t0
	logTag := uint64(0)
	for range 40 {
		logTag++
		feed(l, now, dl("a", logTag, 0))
	}
	wireTag := uint64(1)
	_, _, a, _ := l.ack(ack(wireTag, false), false, now) // starts the first period
	for p := 1; p <= plentyPeriods; p++ {
		now += creditPeriodMs
		logTag++
		feed(l, now, dl("a", logTag, 0))
		wireTag++
		_, _, a, _ = l.ack(ack(wireTag, false), false, now)
		if len(a.tune) != 1 {
			t.Fatalf("period %d: asked %v, want one ask", p, a.tune)
		}
		k := a.tune[0]
		c, change := nextCredit(k, 1)
		if p < plentyPeriods && change {
			t.Fatalf("after %d periods holding plenty the credit changed to %d", p, c)
		}
		if p == plentyPeriods && (!change || c != 40-uint32(k.ctl.minHeld)/2) {
			t.Fatalf("after %d periods holding %d: credit %d (change %v), want %d", p, k.ctl.minHeld, c, change, 40-k.ctl.minHeld/2)
		}
		l.credited("a", c, true, 1)
	}
	k := creditAsk{consumer: "a", prefetch: 100, ctl: creditCtl{base: 1100, credit: 1600, minHeld: 1500, plenty: plentyPeriods}}
	if c, _ := nextCredit(k, 1); c != 1100 {
		t.Fatalf("credit %d, want the Consume's 1,100 at least", c)
	}
	// 1 MiB bodies: 64 MiB is 64 of them beyond the prefetch, but never
	// less than the Consume's credit.
	k = creditAsk{consumer: "a", prefetch: 100, ctl: creditCtl{base: 1100, credit: 1100, starved: true, count: 4, bytes: 4 << 20}}
	if c, change := nextCredit(k, 1); change || c != 1100 {
		t.Fatalf("large bodies: credit %d (change %v), want 1,100 unchanged", c, change)
	}
	k.ctl.bytes = 4 << 10 // 1 KiB bodies: the look-ahead's own bound
	k.ctl.credit = 20_000
	if c, _ := nextCredit(k, 1); c != 100+maxGrownLookahead {
		t.Fatalf("credit %d, want at most prefetch + %d", c, maxGrownLookahead)
	}
}

// Whatever the log assigns under a credit that grows and shrinks, the
// client never holds more than its prefetch unacknowledged, and every
// delivery ends once: acked, nacked, handed back unseen (cancel, close)
// or requeued by the close as the client's.
func TestCredit_ClientNeverHoldsMoreThanPrefetch(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 7))
		l := newLedger()
		const prefetch = 10
		l.startConsume("a", prefetch, 20)
		l.consumed("a", true)
		credit := uint32(20)
		now := t0
		var logTag uint64
		assigned := map[uint64]bool{} // the log's unsettled deliveries
		ended := map[uint64]string{}
		end := func(ref logRef, how string) {
			tag := ref.tag
			if prev, ok := ended[tag]; ok {
				t.Fatalf("seed %d: log tag %d ended twice (%s, then %s)", seed, tag, prev, how)
			}
			if !assigned[tag] {
				t.Fatalf("seed %d: log tag %d ended (%s) but the log does not hold it", seed, tag, how)
			}
			ended[tag] = how
			delete(assigned, tag)
		}
		check := func() {
			n := 0
			for _, w := range l.written {
				if w.consumer == "a" {
					n++
				}
			}
			if n > prefetch {
				t.Fatalf("seed %d: the client holds %d unacknowledged, prefetch %d", seed, n, prefetch)
			}
		}
		var asks []creditAsk
		carry := func(a actions) { asks = append(asks, a.tune...) }
		cancelled := false
		for step := 0; step < 400 && !l.closed; step++ {
			now += int64(r.IntN(60))
			switch op := r.IntN(20); {
			case op < 7 && !cancelled: // the log assigns while there is credit
				for range r.IntN(30) {
					if uint32(len(assigned)) >= credit {
						break
					}
					logTag++
					assigned[logTag] = true
					carry(l.deliver(dl("a", logTag, 0), now))
				}
			case op < 15 && len(l.order) > 0: // the client acks or nacks what it holds
				var m wire.Method
				w := l.order[r.IntN(len(l.order))]
				switch r.IntN(4) {
				case 0:
					m = ack(w, true)
				case 1:
					m = &wire.BasicNack{DeliveryTag: w, Requeue: true}
				default:
					m = ack(w, false)
				}
				if _, ok := l.written[w]; !ok {
					continue
				}
				tags, _, a, e := l.ack(m, false, now)
				if e != nil {
					t.Fatalf("seed %d: %v", seed, e)
				}
				for _, tag := range tags {
					end(tag, "settled")
				}
				carry(a)
			case op < 18 && len(asks) > 0: // the log answers a credit ask
				k := asks[0]
				asks = asks[1:]
				ready := uint64(r.IntN(2) * r.IntN(200))
				next, _ := nextCredit(k, ready)
				ok := r.IntN(5) > 0
				if ok {
					credit = next
				}
				l.credited(k.consumer, next, ok, ready)
			case op == 18 && !cancelled: // basic.cancel
				cancelled = true
				for _, tag := range l.cancel("a") {
					end(tag, "unseen at cancel")
				}
			case op == 19: // the channel closes (or its node dies)
				out := l.close()
				for _, tag := range out.unseen {
					end(tag, "unseen at close")
				}
				for _, tag := range out.redelivered {
					end(tag, "redelivered at close")
				}
			}
			check()
		}
		if !l.closed {
			out := l.close()
			for _, tag := range append(out.unseen, out.redelivered...) {
				end(tag, "closed at the end")
			}
		}
		for _, tag := range l.takeOverdue() {
			end(tag, "withheld")
		}
		if len(assigned) != 0 {
			t.Fatalf("seed %d: %d deliveries never ended", seed, len(assigned))
		}
	}
}

// A consumer starved behind publishers faster than its credit allows is
// raised at once to what covers its round trip: one Credit, not one per
// fourfold step. Its round trip is measured by what it was given (it held
// its whole credit all through), its supply by what it took and how its
// queue's ready messages grew.
func TestCredit_FirstRaiseCoversTheRoundTrip(t *testing.T) {
	// Prefetch 2, credit 3: the Consume's fill of 3 is not the period's rate.
	l := started(t, nil, []string{"a"})
	feed(l, t0, dl("a", 1, 0), dl("a", 2, 0), dl("a", 3, 0))
	if k := tuned(t, l, ack(1, false), t0); len(k) != 0 {
		t.Fatalf("asked %v at the start of the first period", k)
	}
	feed(l, t0+10, dl("a", 4, 0)) // the ack of 1 committed: held
	tuned(t, l, ack(2, false), t0+20)
	tuned(t, l, ack(3, false), t0+30) // the client has room, nothing held
	feed(l, t0+40, dl("a", 5, 0))
	k := tuned(t, l, ack(4, false), t0+creditPeriodMs)
	if len(k) != 1 || !k[0].ctl.starved || k[0].ctl.taken != 2 || k[0].ctl.ready != 0 {
		t.Fatalf("asked %+v, want a starved ask for a that took 2 in the period, no ready before", k)
	}
	// 12 piled up while it took 2 at credit 3: a supply of 14 a period
	// over a round trip of 3/2 periods is 21; twice that, not 4 x 3.
	if c, change := nextCredit(k[0], 12); !change || c != 42 {
		t.Fatalf("starved with 12 ready: credit %d (change %v), want 42", c, change)
	}
	l.credited("a", 42, true, 12)
	if w := l.windows["a"]; w.ctl.ready != 12 || w.ctl.credit != 42 {
		t.Fatalf("after the answer the window has ready %d, credit %d; want 12, 42", w.ctl.ready, w.ctl.credit)
	}
	// Ready no longer growing (or shrinking) but still there: fourfold.
	ask := creditAsk{consumer: "a", prefetch: 100, ctl: creditCtl{base: 1100, credit: 1100, starved: true, taken: 740, ready: 3000}}
	for _, ready := range []uint64{3000, 2000} {
		if c, _ := nextCredit(ask, ready); c != 4400 {
			t.Fatalf("ready from 3,000 to %d: credit %d, want fourfold 4,400", ready, c)
		}
	}

	// Sixteen publishers against a credit of 1,100: the consumer takes its
	// credit once per round trip (300 ms), a supply of 20,000 a second is
	// 6,000 a round trip. Count the Credits until it keeps pace.
	const roundTrip, supply = 0.3, 20_000.0
	cur, ready, steps := uint32(1100), uint64(0), 0
	for float64(cur) < supply*roundTrip && steps < 10 {
		taken := uint64(cur) // a period of one round trip
		before := ready
		ready += uint64(supply*roundTrip) - taken
		ask := creditAsk{consumer: "a", prefetch: 100, ctl: creditCtl{base: 1100, credit: cur, starved: true, taken: taken, ready: before}}
		next, change := nextCredit(ask, ready)
		if !change {
			t.Fatalf("credit %d with %d ready not raised", cur, ready)
		}
		cur = next
		steps++
	}
	if steps != 1 || cur > 100+maxGrownLookahead {
		t.Fatalf("%d Credits to reach %d, want one within prefetch + %d", steps, cur, maxGrownLookahead)
	}
}
