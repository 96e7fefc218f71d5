package fault

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Without docker: the delayed scenario's checker catches an early
// release, a second release, a lost message, a late 99th percentile and
// a released copy without its x-delay mark, and takes a flagged
// redelivery for what it is.
func TestDelayedCheck(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	// clean: 100 messages sent 10 ms apart with delays of 1 s and up,
	// confirmed 5 ms after their send, each received 20 ms after its due
	// time; m001 is also redelivered, flagged, after its consumer's node
	// died, m002's flagged redelivery is recorded a millisecond before its
	// first release (by another consumer, whose goroutine came first),
	// and u (never confirmed) arrives once all the same.
	clean := func() (map[string]*delayedSent, []delayedDelivery) {
		sent := map[string]*delayedSent{}
		var got []delayedDelivery
		for i := range 100 {
			id := fmt.Sprintf("m%03d", i)
			delay := time.Second + time.Duration(i)*time.Millisecond
			s := &delayedSent{id: id, delay: delay, at: ms(10 * i), confirmed: ms(10*i + 5)}
			sent[id] = s
			got = append(got, delayedDelivery{id: id, at: s.at.Add(delay + 20*time.Millisecond), mark: -delay.Milliseconds(), marked: true, node: "raftmq2"})
		}
		got = append(got, delayedDelivery{id: "m001", at: ms(5000), redelivered: true, mark: -1001, marked: true, node: "raftmq3"})
		got = append(got, delayedDelivery{id: "m002", at: ms(20 + 1002 + 19), redelivered: true, mark: -1002, marked: true, node: "raftmq3"})
		sent["u"] = &delayedSent{id: "u", delay: time.Second, at: ms(0)}
		got = append(got, delayedDelivery{id: "u", at: ms(1500), mark: -1000, marked: true, node: "raftmq1"})
		return sent, got
	}
	sent, got := clean()
	rep, bad := delayedViolations("clean", sent, got, 2*time.Second, faultWindows{})
	if len(bad) != 0 {
		t.Fatalf("violations in a clean run: %v", bad)
	}
	if rep.published != 101 || rep.confirmed != 100 || rep.released != 100 || rep.unconfirmed != 1 || rep.redeliveries != 2 ||
		rep.lost != 0 || rep.doubles != 0 || rep.early != 0 || rep.lateSamples != 100 || rep.lateP99 != 20*time.Millisecond {
		t.Fatalf("report of a clean run: %+v", rep)
	}

	for _, tc := range []struct {
		name string
		bend func(map[string]*delayedSent, []delayedDelivery) []delayedDelivery
		want string
	}{
		{"early", func(s map[string]*delayedSent, g []delayedDelivery) []delayedDelivery {
			g[7].at = s["m007"].at.Add(s["m007"].delay - 2*time.Millisecond)
			return g
		}, "m007 (x-delay 1.007s) received by raftmq2 2ms early"},
		{"released twice", func(s map[string]*delayedSent, g []delayedDelivery) []delayedDelivery {
			return append(g, delayedDelivery{id: "m042", at: ms(9000), mark: -1042, marked: true, node: "raftmq1"})
		}, "m042 released again"},
		{"unconfirmed released twice", func(s map[string]*delayedSent, g []delayedDelivery) []delayedDelivery {
			return append(g, delayedDelivery{id: "u", at: ms(1600), mark: -1000, marked: true, node: "raftmq1"})
		}, "u released again"},
		{"lost", func(s map[string]*delayedSent, g []delayedDelivery) []delayedDelivery {
			return append(g[:3], g[4:]...)
		}, "confirmed message m003 (x-delay 1.003s) was never released"},
		{"late p99", func(s map[string]*delayedSent, g []delayedDelivery) []delayedDelivery {
			// Two of a hundred 3 s late put the 99th percentile there.
			for _, i := range []int{10, 20} {
				g[i].at = g[i].at.Add(3 * time.Second)
			}
			return g
		}, "at the 99th percentile (of 100 confirmed within 200ms), more than 2s"},
		{"unmarked", func(s map[string]*delayedSent, g []delayedDelivery) []delayedDelivery {
			g[5].marked = false
			return g
		}, "m005 released with x-delay"},
		{"never published", func(s map[string]*delayedSent, g []delayedDelivery) []delayedDelivery {
			return append(g, delayedDelivery{id: "ghost", at: ms(100)})
		}, `delivery of "ghost"`},
	} {
		sent, got := clean()
		bad := func() []string {
			_, bad := delayedViolations(tc.name, sent, tc.bend(sent, got), 2*time.Second, faultWindows{})
			return bad
		}()
		if !strings.Contains(strings.Join(bad, "\n"), tc.want) {
			t.Errorf("%s: violations %v, want one saying %q", tc.name, bad, tc.want)
		}
	}

	// A release within the log's millisecond of its due time is not
	// early: the send time is read to the nanosecond, the stamp to the
	// millisecond.
	sent, got = clean()
	got[7].at = sent["m007"].at.Add(sent["m007"].delay - 900*time.Microsecond)
	if rep, bad := delayedViolations("within the millisecond", sent, got, 2*time.Second, faultWindows{}); len(bad) != 0 || rep.early != 0 {
		t.Errorf("a release 0.9 ms before its due time: violations %v", bad)
	}

	// One late message in a hundred is within the 99th percentile, and a
	// publish the fault held up (confirmed late) is not a sample.
	sent, got = clean()
	got[10].at = got[10].at.Add(3 * time.Second)
	sent["m020"].confirmed = sent["m020"].at.Add(time.Second)
	got[20].at = got[20].at.Add(3 * time.Second)
	rep, bad = delayedViolations("one late", sent, got, 2*time.Second, faultWindows{})
	if len(bad) != 0 || rep.lateSamples != 99 || rep.lateMax != 3020*time.Millisecond {
		t.Errorf("one late in a hundred and one held-up publish: violations %v, report %+v", bad, rep)
	}

	// What fell due during each fault is counted.
	rep, _ = delayedViolations("windows", sent, got, 2*time.Second, faultWindows{
		killFrom: ms(1000), killTo: ms(1100), freezeFrom: ms(1500), freezeTo: ms(2000)})
	// Message i is due at 1000 + 11i ms.
	if rep.dueInKill != 10 || rep.dueInFreeze != 45 {
		t.Errorf("due in the kill %d, want 10 (m000..m009); due in the freeze %d, want 45 (m046..m090)",
			rep.dueInKill, rep.dueInFreeze)
	}
}

// The table reports the 2 s target met or missed; the scenario fails only
// past its bound.
func TestDelayedTable_ReportsTheTarget(t *testing.T) {
	for _, tc := range []struct {
		p99  time.Duration
		want string
	}{
		{1500 * time.Millisecond, "2s met"},
		{2500 * time.Millisecond, "2s MISSED"},
	} {
		var b strings.Builder
		writeDelayedTable(&b, []delayedReport{{scenario: "x", lateP99: tc.p99, target: delayedLateP99, nodesBack: true}})
		if !strings.Contains(b.String(), tc.want) {
			t.Errorf("p99 %v: table\n%s\nwithout %q", tc.p99, b.String(), tc.want)
		}
	}
	if delayedLateBound <= delayedLateP99 {
		t.Fatalf("the scenario fails at %v, below its target %v", delayedLateBound, delayedLateP99)
	}
}
