package fault

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// These tests run without docker: they show the checker catches what the
// suite is there to catch.

func recorded(t0 time.Time) *recorder {
	r := newRecorder()
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	r.published(&sent{id: "a", queue: workQueue, ttl: noTTL, at: ms(0)})
	r.confirmed("a", ms(5))
	r.published(&sent{id: "b", queue: workQueue, ttl: 100 * time.Millisecond, at: ms(10)})
	r.confirmed("b", ms(15))
	r.published(&sent{id: "c", queue: delayQueue, ttl: time.Second, at: ms(20)})
	r.confirmed("c", ms(25))
	r.published(&sent{id: "u", queue: workQueue, ttl: noTTL, at: ms(30)}) // never confirmed
	r.delivered(delivery{id: "a", queue: workQueue, at: ms(6)})
	r.delivered(delivery{id: "b", queue: workQueue, at: ms(16)})
	r.delivered(delivery{id: "c", queue: deadQueue, at: ms(1030), reason: "expired"})
	return r
}

func TestCheck_CleanRun(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := recorded(t0)
	rep, bad := r.check("clean", limits{deliveryGrace: 50 * time.Millisecond}, t0, t0.Add(40*time.Millisecond))
	if len(bad) != 0 {
		t.Fatalf("violations in a clean run: %v", bad)
	}
	if rep.published != 4 || rep.confirmed != 3 || rep.consumed != 2 || rep.deadLettered != 1 || rep.lost != 0 {
		t.Fatalf("report = %+v", rep)
	}
	if rep.latenessP99 != 10*time.Millisecond {
		t.Fatalf("lateness p99 = %v, want 10ms (received 1030ms, sent 20ms + 1s ttl)", rep.latenessP99)
	}
	if rep.maxPause != 15*time.Millisecond {
		t.Fatalf("max pause = %v, want 15ms (last confirm at 25ms, window ends at 40ms)", rep.maxPause)
	}
}

func TestCheck_FindsLossLatenessAndUnflaggedDuplicates(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := recorded(t0)
	r.published(&sent{id: "lost", queue: workQueue, ttl: noTTL, at: t0})
	r.confirmed("lost", t0.Add(time.Millisecond))
	r.published(&sent{id: "late", queue: workQueue, ttl: 100 * time.Millisecond, at: t0})
	r.confirmed("late", t0.Add(time.Millisecond))
	r.delivered(delivery{id: "late", queue: workQueue, at: t0.Add(500 * time.Millisecond)})
	r.delivered(delivery{id: "a", queue: workQueue, at: t0.Add(time.Second)})                         // duplicate, unflagged
	r.delivered(delivery{id: "b", queue: workQueue, redelivered: true, at: t0.Add(time.Millisecond)}) // duplicate, flagged
	// Received after its redelivery (another consumer's, recorded
	// first): the unflagged copy is still the message's one first
	// delivery.
	r.published(&sent{id: "d", queue: workQueue, ttl: noTTL, at: t0})
	r.confirmed("d", t0.Add(time.Millisecond))
	r.delivered(delivery{id: "d", queue: workQueue, redelivered: true, at: t0.Add(3 * time.Millisecond)})
	r.delivered(delivery{id: "d", queue: workQueue, at: t0.Add(4 * time.Millisecond)}) // duplicate, the unflagged original
	r.delivered(delivery{id: "ghost", queue: workQueue, at: t0})
	r.delivered(delivery{id: "c", queue: deadQueue, at: t0.Add(2 * time.Second), reason: "rejected", redelivered: true})

	rep, bad := r.check("faulty", limits{deliveryGrace: 50 * time.Millisecond}, t0, t0.Add(time.Second))
	if rep.lost != 1 || rep.late != 1 || rep.duplicated != 4 || rep.unflaggedDups != 1 || rep.wrongReason != 1 {
		t.Fatalf("report = %+v", rep)
	}
	want := []string{"message lost (to fault.work, no ttl) was lost", "late (ttl 100ms) delivered", "a delivered again", "never published", `reason "rejected"`}
	all := strings.Join(bad, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("violations lack %q:\n%s", w, all)
		}
	}
}

// The dead-letter lateness counts the messages confirmed within
// fastConfirm only, and a scenario's bounds on it and on the longest
// pause without confirms are violations when passed.
func TestCheck_DeathLatenessAndPauseBounds(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	r := recorded(t0) // c: published at 20ms, confirmed 5ms later, dead 10ms after its deadline
	// Confirmed 3 s after its publish: its stamp is anywhere in between,
	// so its lateness says nothing and is left out.
	r.published(&sent{id: "slow", queue: delayQueue, ttl: time.Second, at: ms(0)})
	r.confirmed("slow", ms(3000))
	r.delivered(delivery{id: "slow", queue: deadQueue, at: ms(4000), reason: "expired"})
	rep, bad := r.check("slow confirm", limits{deliveryGrace: 50 * time.Millisecond, deathLate: time.Second}, t0, ms(3000))
	if rep.lateSamples != 1 || rep.latenessP99 != 10*time.Millisecond || len(bad) != 0 {
		t.Fatalf("lateness p99 %v over %d samples, violations %v; want 10ms over c alone, none", rep.latenessP99, rep.lateSamples, bad)
	}

	// Confirmed at once and dead-lettered 3 s late: over a 2 s bound.
	r.published(&sent{id: "stuck", queue: delayQueue, ttl: time.Second, at: ms(100)})
	r.confirmed("stuck", ms(150))
	r.delivered(delivery{id: "stuck", queue: deadQueue, at: ms(4100), reason: "expired"})
	rep, bad = r.check("late death", limits{deliveryGrace: 50 * time.Millisecond, deathLate: 2 * time.Second, pause: 2 * time.Second}, t0, ms(4000))
	all := strings.Join(bad, "\n")
	if rep.latenessP99 != 3*time.Second || !strings.Contains(all, "99th percentile") {
		t.Fatalf("lateness p99 %v, violations:\n%s\nwant 3s and a lateness violation", rep.latenessP99, all)
	}
	// The last confirm is at 3000ms and the window ends at 4000ms; the
	// longest gap is 150ms -> 3000ms.
	if rep.maxPause != 2850*time.Millisecond || !strings.Contains(all, "no confirm for 2.85s") {
		t.Fatalf("max pause %v, violations:\n%s\nwant 2.85s and a pause violation", rep.maxPause, all)
	}
	// The time no majority of nodes ran is docker's, not the broker's:
	// 0.85 s of it brings the pause to the bound, 0.84 s leaves it over.
	pauseOnly := limits{deliveryGrace: 50 * time.Millisecond, pause: 2 * time.Second}
	pauseOnly.noProcess = 850 * time.Millisecond
	if _, bad := r.check("no process", pauseOnly, t0, ms(4000)); len(bad) != 0 {
		t.Fatalf("violations with 850ms of no process: %v", bad)
	}
	pauseOnly.noProcess = 840 * time.Millisecond
	if _, bad := r.check("no process", pauseOnly, t0, ms(4000)); len(bad) != 1 || !strings.Contains(bad[0], "of which no majority of nodes ran for 840ms") {
		t.Fatalf("violations with 840ms of no process: %v; want the pause", bad)
	}
	// Without bounds the same records are no violation.
	if _, bad := r.check("unbounded", limits{deliveryGrace: 50 * time.Millisecond}, t0, ms(4000)); len(bad) != 0 {
		t.Fatalf("violations without bounds: %v", bad)
	}
}

// A dead letter received only redelivered was held by a silent node's
// consumer: it is left out of the 99th percentile and held to heldLate,
// which it passes only by more than NodeDownAfter.
func TestCheck_HeldDeathsHaveTheirOwnBound(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	r := recorded(t0) // c: dead 10ms after its deadline
	r.published(&sent{id: "held", queue: delayQueue, ttl: time.Second, at: ms(100)})
	r.confirmed("held", ms(150))
	r.delivered(delivery{id: "held", queue: deadQueue, at: ms(4100), reason: "expired", redelivered: true})
	lim := limits{deliveryGrace: 50 * time.Millisecond, deathLate: 2 * time.Second, heldLate: 3500 * time.Millisecond}
	rep, bad := r.check("held", lim, t0, ms(4000))
	if len(bad) != 0 || rep.latenessP99 != 10*time.Millisecond || rep.lateSamples != 1 || rep.heldSamples != 1 || rep.heldLateMax != 3*time.Second {
		t.Fatalf("report %+v, violations %v; want c alone in the percentile, held 3s late, none", rep, bad)
	}
	lim.heldLate = 2999 * time.Millisecond
	if _, bad := r.check("held too long", lim, t0, ms(4000)); len(bad) != 1 || !strings.Contains(bad[0], "a silent node held reached a client 3s after") {
		t.Fatalf("violations %v; want the held death's", bad)
	}
	// The same death received unflagged counts in the percentile.
	r = recorded(t0)
	r.published(&sent{id: "late", queue: delayQueue, ttl: time.Second, at: ms(100)})
	r.confirmed("late", ms(150))
	r.delivered(delivery{id: "late", queue: deadQueue, at: ms(4100), reason: "expired"})
	if rep, bad := r.check("unheld", lim, t0, ms(4000)); len(bad) != 1 || rep.latenessP99 != 3*time.Second || rep.heldSamples != 0 {
		t.Fatalf("report %+v, violations %v; want a 3s p99 and its violation", rep, bad)
	}
	// A death received unflagged and, recorded a moment before, flagged
	// (another consumer's redelivery, handed over first): it was
	// delivered unflagged first, so its lateness is the unflagged copy's,
	// in the percentile, and nothing was held.
	r = recorded(t0)
	r.published(&sent{id: "both", queue: delayQueue, ttl: time.Second, at: ms(100)})
	r.confirmed("both", ms(150))
	r.delivered(delivery{id: "both", queue: deadQueue, at: ms(1120), reason: "expired", redelivered: true})
	r.delivered(delivery{id: "both", queue: deadQueue, at: ms(1130), reason: "expired"})
	rep, bad = r.check("both", lim, t0, ms(4000))
	if len(bad) != 0 || rep.lateSamples != 2 || rep.latenessP99 != 30*time.Millisecond || rep.heldSamples != 0 {
		t.Fatalf("report %+v, violations %v; want both deaths in the percentile, the later 30ms late (its unflagged copy), none held", rep, bad)
	}
}

func TestLeaseResult_Violations(t *testing.T) {
	t0 := time.Unix(1000, 0)
	base := leaseResult{name: "q", declared: t0, expires: 3 * time.Second, allowed: time.Second}
	cases := []struct {
		name string
		mod  func(*leaseResult)
		want string
	}{
		{"on time", func(l *leaseResult) { l.gone = t0.Add(3500 * time.Millisecond) }, ""},
		{"early", func(l *leaseResult) { l.gone = t0.Add(2 * time.Second) }, "early"},
		{"late", func(l *leaseResult) { l.gone = t0.Add(5 * time.Second) }, "late"},
		{"never", func(l *leaseResult) {}, "never deleted"},
		{"used and kept", func(l *leaseResult) { l.used = true }, ""},
		{"used but deleted", func(l *leaseResult) { l.used, l.gone = true, t0.Add(4*time.Second) }, "in use"},
	}
	for _, c := range cases {
		l := base
		c.mod(&l)
		got := strings.Join(l.violations(), "; ")
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: violations %q, want one with %q", c.name, got, c.want)
		}
	}
}

func TestLongestGap(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	got := longestGap([]time.Time{at(50), at(10), at(400), at(450), at(2000)}, at(0), at(1000))
	if got != 550*time.Millisecond {
		t.Fatalf("longest gap = %v, want 550ms (the last confirm at 450ms to the window end)", got)
	}
	if got := longestGap(nil, at(0), at(1000)); got != time.Second {
		t.Fatalf("longest gap with no confirms = %v, want the whole window", got)
	}
}

func TestWriteTable_SaysWhenANodeDidNotComeBackAndWhenGroupsLedAgain(t *testing.T) {
	var b strings.Builder
	writeTable(&b, []report{
		{scenario: "whole", nodesBack: true, ledMeasured: true, ledAgain: 1234 * time.Millisecond},
		{scenario: "broken", nodesBack: false, ledMeasured: true},
		{scenario: "unmeasured", nodesBack: true},
	})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("table:\n%s", b.String())
	}
	head := strings.Fields(lines[0])
	back, led := slices.Index(head, "nodes-back"), slices.Index(head, "led-again")
	if back < 0 || led < 0 {
		t.Fatalf("columns missing:\n%s", b.String())
	}
	for i, want := range [][2]string{{"yes", "1.23s"}, {"NO", "never"}, {"yes", "-"}} {
		f := strings.Fields(lines[i+1])
		if f[back] != want[0] || f[led] != want[1] {
			t.Fatalf("row %d: nodes-back %q led-again %q, want %q:\n%s", i, f[back], f[led], want, b.String())
		}
	}
}

// A drain waits for the confirmed messages no consumer has named: not for
// an unconfirmed one, nor for one received twice.
func TestUnreceived(t *testing.T) {
	r := newRecorder()
	t0 := time.Unix(1000, 0)
	for _, id := range []string{"a", "b", "c", "u"} {
		r.published(&sent{id: id, at: t0})
	}
	for _, id := range []string{"a", "b", "c"} {
		r.confirmed(id, t0)
	}
	if n := r.missing(); n != 3 {
		t.Fatalf("nothing received: %d missing, want 3", n)
	}
	r.delivered(delivery{id: "a"})
	r.delivered(delivery{id: "a", redelivered: true})
	r.delivered(delivery{id: "u"})
	if n := r.missing(); n != 2 {
		t.Fatalf("a and u received: %d missing, want 2", n)
	}
}

// A confirm needs a majority of the nodes running: of a whole cluster's
// stop and start (every exit before every start), the time that does not
// count against the broker runs from the exit that leaves fewer than a
// majority to the start that makes one again, in whatever order docker
// stopped and started them.
func TestWithoutMajority(t *testing.T) {
	base := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	at := func(ms ...int64) []time.Time {
		var out []time.Time
		for _, m := range ms {
			out = append(out, base.Add(time.Duration(m)*time.Millisecond))
		}
		return out
	}
	for _, tc := range []struct {
		name         string
		exits, start []time.Time
		want         time.Duration
	}{
		{"three, staggered", at(100, 300, 200), at(4000, 9000, 6000), 5800 * time.Millisecond},
		{"three, together", at(100, 100, 100), at(1000, 1000, 1000), 900 * time.Millisecond},
		{"five", at(1, 2, 3, 4, 5), at(10, 20, 30, 40, 50), 27 * time.Millisecond},
		{"none", nil, nil, 0},
	} {
		if got := withoutMajority(tc.exits, tc.start); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
