package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftmq/raftmq/e2e"
)

func TestDelayedBody_RoundTrip(t *testing.T) {
	body := make([]byte, 64)
	sent := time.Unix(1700000000, 123456789)
	putDelayed(body, 42, sent, 90000)
	id, got, delay, ok := readDelayed(body)
	if !ok || id != 42 || !got.Equal(sent) || delay != 90000 {
		t.Fatalf("read %d %v %d %v", id, got, delay, ok)
	}
	if _, _, _, ok := readDelayed(body[:delayedBodyMin-1]); ok {
		t.Fatal("a body shorter than the header was read")
	}
	// Due at the send time's millisecond plus the delay: log time counts
	// whole milliseconds.
	if d := dueMs(sent, 90000); d != 1700000000123+90000 {
		t.Fatalf("due %d", d)
	}
}

func TestSpreadDelay_UniformOverTheWindow(t *testing.T) {
	const n, bins = 20000, 10
	lo, spread := time.Second, 10*time.Minute
	var hist [bins]int
	for id := uint64(0); id < n; id++ {
		d := spreadDelay(id, lo, spread)
		if d < lo.Milliseconds() || d >= (lo+spread).Milliseconds() {
			t.Fatalf("delay of %d is %d ms, outside the window", id, d)
		}
		hist[(d-lo.Milliseconds())*bins/spread.Milliseconds()]++
	}
	for i, c := range hist {
		if c < n/bins*9/10 || c > n/bins*11/10 {
			t.Fatalf("bin %d holds %d of %d: %v", i, c, n, hist)
		}
	}
	if d := spreadDelay(0, 0, time.Second); d != 1 {
		t.Fatalf("a zero delay (routed at once) was given: %d", d)
	}
}

func TestSameDelay_OneInstant(t *testing.T) {
	instant := time.Unix(1700000030, 0).UnixMilli()
	for _, ns := range []int64{0, 1, 999999, 1000000, 123456789, 29999999999} {
		now := time.Unix(1700000000, 0).Add(time.Duration(ns))
		if due := dueMs(now, sameDelay(now, instant)); due != instant {
			t.Fatalf("sent at +%dns: due %d, want %d", ns, due, instant)
		}
	}
	if d := sameDelay(time.UnixMilli(instant+5), instant); d != 1 {
		t.Fatalf("past the instant: delay %d, want 1", d)
	}
}

// arrival is a body of message id sent at sent with delay ms.
func arrival(id uint64, sent time.Time, delay int64) []byte {
	b := make([]byte, delayedBodyMin)
	putDelayed(b, id, sent, delay)
	return b
}

func TestDelayTracker_CountsEveryOutcome(t *testing.T) {
	tr := newDelayTracker(5, true)
	t0 := time.UnixMilli(1700000000000)
	for id := 0; id < 5; id++ {
		tr.published(id, dueMs(t0, 1000))
	}
	for id := 0; id < 4; id++ {
		tr.confirmed(id, true, t0)
	}
	tr.confirmed(4, false, t0)
	tr.confirmed(0, true, t0) // a second answer changes nothing
	due := t0.Add(time.Second)
	tr.arrive(arrival(0, t0, 1000), due.Add(5*time.Millisecond), false, 0)
	tr.arrive(arrival(1, t0, 1000), due.Add(-2*time.Millisecond), false, 0) // early
	tr.arrive(arrival(1, t0, 1000), due.Add(7*time.Millisecond), false, 0)  // twice
	tr.arrive(arrival(2, t0, 1000), due, false, 0)
	tr.arrive(arrival(2, t0, 1000), due, true, 0)   // again after a lost ack
	tr.arrive(arrival(99, t0, 1000), due, false, 0) // not of this run
	tr.arrive([]byte("short"), due, false, 0)
	if tr.done() {
		t.Fatal("done with message 3 missing")
	}
	r := tr.report(1)
	if r.Expected != 4 || r.Received != 3 || r.Early != 1 || r.MaxEarlyMs != 2 || r.Duplicates != 1 || r.Redelivered != 1 || r.Missing != 1 || r.Unknown != 2 {
		t.Fatalf("report = %+v", r)
	}
	if r.Lateness.Count != 3 || r.Lateness.Max != 5 || r.BurstDeliveredWithinMs != nil {
		t.Fatalf("lateness = %+v, burst %v", r.Lateness, r.BurstDeliveredWithinMs)
	}
	tr.arrive(arrival(3, t0, 1000), due, false, 0)
	if !tr.done() {
		t.Fatal("not done with every confirmed message received")
	}
}

// The messages due after publishing ended are summed apart as well.
func TestDelayTracker_LatenessDueAfterPublishing(t *testing.T) {
	tr := newDelayTracker(2, false)
	t0 := time.UnixMilli(1700000000000)
	tr.published(0, dueMs(t0, 1000))
	tr.published(1, dueMs(t0, 5000))
	tr.publishingEnded(t0.Add(2 * time.Second))
	tr.arrive(arrival(0, t0, 1000), t0.Add(1300*time.Millisecond), false, 0)
	tr.arrive(arrival(1, t0, 5000), t0.Add(5004*time.Millisecond), false, 0)
	r := tr.report(1)
	if r.Lateness.Count != 2 || r.Lateness.Max != 300 {
		t.Fatalf("lateness = %+v", r.Lateness)
	}
	if q := r.LatenessDueAfterPublishing; q.Count != 1 || q.Max != 4 {
		t.Fatalf("lateness due after publishing = %+v; want the one message due at +5 s, 4 ms late", q)
	}
}

// The lateness from the confirm leaves the publish's own latency out:
// arrival minus (confirm + delay), 0 where the confirm came late or
// after the message.
func TestDelayTracker_LatenessFromTheConfirm(t *testing.T) {
	tr := newDelayTracker(3, true)
	t0 := time.UnixMilli(1700000000000)
	for id := range 3 {
		tr.published(id, dueMs(t0, 1000))
	}
	tr.confirmed(0, true, t0.Add(200*time.Millisecond)) // a slow publish
	tr.confirmed(1, true, t0.Add(2*time.Millisecond))
	tr.publishingEnded(t0.Add(500 * time.Millisecond))
	tr.arrive(arrival(0, t0, 1000), t0.Add(1210*time.Millisecond), false, 0)
	tr.arrive(arrival(1, t0, 1000), t0.Add(1005*time.Millisecond), false, 0)
	tr.arrive(arrival(2, t0, 1000), t0.Add(1030*time.Millisecond), false, 0) // before its confirm
	tr.confirmed(2, true, t0.Add(1100*time.Millisecond))
	r := tr.report(1)
	if r.Lateness.Count != 3 || r.Lateness.Max != 210 {
		t.Fatalf("lateness = %+v", r.Lateness)
	}
	l := r.LatenessFromConfirm
	if l.Count != 3 || l.Max != 10 || l.P50 != 3 {
		t.Fatalf("lateness from the confirm = %+v; want 10, 3 and 0 ms", l)
	}
	if q := r.LatenessFromConfirmDueAfterPublishing; q.Count != 3 || q.Max != 10 {
		t.Fatalf("due after publishing = %+v", q)
	}
	// Without confirms there is no lower bound.
	nc := newDelayTracker(1, false)
	nc.published(0, dueMs(t0, 1000))
	nc.arrive(arrival(0, t0, 1000), t0.Add(1100*time.Millisecond), false, 0)
	if r := nc.report(1); r.LatenessFromConfirm.Count != 0 {
		t.Fatalf("a lower bound without confirms: %+v", r.LatenessFromConfirm)
	}
}

// Where the broker says when it took a message in (timestamp_in_ms),
// the lateness is also counted from then: the publisher's wait before it
// is left out, and a message without the header is not counted.
func TestDelayTracker_LatenessFromTheBrokersReceipt(t *testing.T) {
	tr := newDelayTracker(3, false)
	t0 := time.UnixMilli(1700000000000)
	for id := range 3 {
		tr.published(id, dueMs(t0, 1000))
	}
	tr.publishingEnded(t0.Add(100 * time.Millisecond))
	// Sent at t0; the broker took 0 in 40 ms later, 1 at once.
	tr.arrive(arrival(0, t0, 1000), t0.Add(1050*time.Millisecond), false, t0.Add(40*time.Millisecond).UnixMilli())
	tr.arrive(arrival(1, t0, 1000), t0.Add(1020*time.Millisecond), false, t0.UnixMilli())
	tr.arrive(arrival(2, t0, 1000), t0.Add(1090*time.Millisecond), false, 0)
	r := tr.report(1)
	if r.Lateness.Count != 3 || r.Lateness.Max != 90 {
		t.Fatalf("lateness = %+v", r.Lateness)
	}
	l := r.LatenessFromReceived
	if l == nil || l.Count != 2 || l.Max != 20 || l.P50 != 10 {
		t.Fatalf("lateness from the receipt = %+v; want 10 and 20 ms", l)
	}
	if q := r.LatenessFromReceivedDueAfterPublishing; q == nil || q.Count != 2 {
		t.Fatalf("lateness from the receipt, due after publishing = %+v", q)
	}
	none := newDelayTracker(1, false)
	none.published(0, dueMs(t0, 1000))
	none.arrive(arrival(0, t0, 1000), t0.Add(time.Second), false, 0)
	if r := none.report(1); r.LatenessFromReceived != nil {
		t.Fatalf("lateness from the receipt %+v with no header", r.LatenessFromReceived)
	}
}

func TestDelayTracker_WithoutConfirmsExpectsWhatWasPublished(t *testing.T) {
	tr := newDelayTracker(3, false)
	tr.published(0, 10)
	tr.published(1, 20)
	if r := tr.report(0); r.Expected != 2 || r.Missing != 2 {
		t.Fatalf("report = %+v", r)
	}
	if tr.lastDue() != 20 {
		t.Fatalf("last due %d", tr.lastDue())
	}
}

func TestDelayTracker_BurstAndSaveLoad(t *testing.T) {
	t0 := time.UnixMilli(1700000000000)
	tr := newDelayTracker(3, true)
	tr.instantMs = t0.Add(30 * time.Second).UnixMilli()
	for id := 0; id < 3; id++ {
		sent := t0.Add(time.Duration(id) * time.Millisecond)
		tr.published(id, dueMs(sent, sameDelay(sent, tr.instantMs)))
		tr.confirmed(id, id < 2, sent)
	}
	path := filepath.Join(t.TempDir(), "expect")
	if err := tr.save(path, "x", "q", 123); err != nil {
		t.Fatal(err)
	}
	got, e, err := loadTracker(path)
	if err != nil {
		t.Fatal(err)
	}
	if e.Exchange != "x" || e.Queue != "q" || e.AcceptedPerS != 123 || got.expected != 2 || got.instantMs != tr.instantMs || got.lastDue() != tr.instantMs {
		t.Fatalf("loaded %+v, expected %d, instant %d", e, got.expected, got.instantMs)
	}
	instant := time.UnixMilli(tr.instantMs)
	got.arrive(arrival(0, t0, sameDelay(t0, tr.instantMs)), instant.Add(40*time.Millisecond), false, 0)
	got.arrive(arrival(1, t0, sameDelay(t0, tr.instantMs)), instant.Add(150*time.Millisecond), false, 0)
	r := got.report(e.AcceptedPerS)
	if r.BurstDeliveredWithinMs == nil || *r.BurstDeliveredWithinMs != 150 || r.Missing != 0 || r.DueInstantMs != tr.instantMs {
		t.Fatalf("report = %+v", r)
	}
	if _, _, err := loadTracker(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Fatal("a missing file loaded")
	}
}

func TestParseRSSAnon(t *testing.T) {
	status := "Name:\traftmq\nVmRSS:\t  204800 kB\nRssAnon:\t  150528 kB\nRssFile:\t   54272 kB\n"
	if got := parseRSSAnon(status); got != 150528 {
		t.Fatalf("RssAnon %d", got)
	}
	if got := parseRSSAnon("Name:\tx\n"); got != -1 {
		t.Fatalf("no RssAnon line: %d", got)
	}
}

func TestOptions_Delayed(t *testing.T) {
	o, err := parseOptions([]string{"-mode", "delayed", "-queue", "d", "-pids", "1, 2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Count != 10000 || o.Duration != 24*time.Hour || o.Exchange != "d-dx" || len(o.PIDs) != 2 {
		t.Fatalf("options = %+v", o)
	}
	if o, _ := parseOptions([]string{"-mode", "delayed", "-duration", "1m"}, io.Discard); o.Duration != time.Minute {
		t.Fatalf("-duration given: %v", o.Duration)
	}
	for _, bad := range [][]string{
		{"-mode", "delayed", "-size", "16"},
		{"-mode", "delayed", "-phase", "later", "-expect", "f"},
		{"-mode", "delayed", "-phase", "publish"},
		{"-mode", "delayed", "-delay-spread", "0"},
		{"-mode", "delayed", "-delay-same", "-1s"},
		{"-mode", "delayed", "-producers", "0"},
		{"-pids", "x"},
	} {
		if _, err := parseOptions(bad, io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// runReport runs the tool and returns its JSON report.
func runReport(t *testing.T, args ...string) report {
	t.Helper()
	var out bytes.Buffer
	if code := run(context.Background(), args, &out, &out); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	var r report
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil || r.Delayed == nil {
		t.Fatalf("last line is not a delayed report: %v\n%s", err, out.String())
	}
	return r
}

func TestRunDelayed_AgainstARealNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a raftmq process; skipped with -short")
	}
	c := e2e.StartCluster(t, 1)
	uri := c.Nodes[0].AMQPURL()
	r := runReport(t, "-uri", uri, "-mode", "delayed", "-count", "200", "-delay-min", "200ms", "-delay-spread", "300ms", "-size", "64", "-queue", "d1", "-linger", "200ms")
	d := r.Delayed
	if r.Confirmed != 200 || d.Expected != 200 || d.Received != 200 || d.Missing != 0 || d.Early != 0 || d.Duplicates != 0 || d.Lateness.Count != 200 || d.AcceptedPerS <= 0 {
		t.Fatalf("report = %+v, delayed %+v", r, d)
	}

	// Published now, consumed by another run: all due in one millisecond.
	expect := filepath.Join(t.TempDir(), "expect")
	r = runReport(t, "-uri", uri, "-mode", "delayed", "-phase", "publish", "-expect", expect, "-count", "100", "-delay-same", "1500ms", "-size", "64", "-queue", "d2")
	if r.Confirmed != 100 || r.Delayed.Received != 0 || r.Delayed.Expected != 100 {
		t.Fatalf("publish phase: %+v, delayed %+v", r, r.Delayed)
	}
	r = runReport(t, "-uri", uri, "-mode", "delayed", "-phase", "consume", "-expect", expect, "-linger", "200ms")
	d = r.Delayed
	if d.Received != 100 || d.Missing != 0 || d.Early != 0 || d.Duplicates != 0 || d.BurstDeliveredWithinMs == nil || *d.BurstDeliveredWithinMs < 0 || d.AcceptedPerS <= 0 {
		t.Fatalf("consume phase: %+v", d)
	}
}
