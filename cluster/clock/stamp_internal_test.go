package clock

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

// fixedQuorum is a quorumTime the test sets: the quorum's clocks read
// at ms when the monotonic clock reads 0.
type fixedQuorum struct {
	ok bool
	at int64 // unix ms the quorum's clocks read at monotonic 0
}

func (q *fixedQuorum) estimate() clockEstimate {
	return clockEstimate{ok: q.ok, offset: q.at * int64(time.Millisecond)}
}

func TestStamper_FollowsTheQuorumByTheMonotonicClock(t *testing.T) {
	clk := &manualClock{}
	q := &fixedQuorum{}
	s := newStamper(clk, q, 500*time.Millisecond)
	want := func(what string, ms int64) {
		t.Helper()
		if got := s.Peek(); got != ms {
			t.Fatalf("%s: peek %d, want %d", what, got, ms)
		}
		if got := s.Next(); got != ms {
			t.Fatalf("%s: stamp %d, want %d", what, got, ms)
		}
	}
	// A term starts at the log's clock; with no reading of the quorum's
	// clocks it goes on by the monotonic clock, whatever the wall says.
	s.reset(5000)
	clk.set(1_000_000_000) // this node's wall clock: ignored
	clk.advance(100)
	want("no quorum", 5100)
	// The quorum's clocks are ahead: log time jumps to them.
	q.ok, q.at = true, 10_000
	want("quorum ahead", 10_100)
	clk.advance(1000)
	want("quorum in step", 11_100)
	// The quorum's reading moves back a little (drift): log time runs
	// at 90% until it meets it, never stands still.
	q.at = 9_800
	clk.advance(1000)
	want("slewing", 11_100+900)
	clk.advance(1000)
	want("slewing", 12_000+900)
	clk.advance(1000)
	want("met the quorum", 13_900)
	// Far back (the quorum's clocks stepped back an hour): log time goes
	// on at the real rate, neither waiting for them nor slowing.
	q.at -= time.Hour.Milliseconds()
	clk.advance(1000)
	want("quorum far back", 14_900)
	// A new term starts from the log's clock, not from the quorum's
	// reading nor from where this node's last term left log time.
	s.reset(20_000)
	clk.advance(500)
	want("next term", 20_500)
}

type manualClock struct{ ms, mono atomic.Int64 }

func (c *manualClock) set(ms int64)     { c.ms.Store(ms) }
func (c *manualClock) advance(ms int64) { c.ms.Add(ms); c.mono.Add(ms) }
func (c *manualClock) Now() time.Time   { return time.UnixMilli(c.ms.Load()) }
func (c *manualClock) Monotonic() time.Duration {
	return time.Duration(c.mono.Load()) * time.Millisecond
}
func (c *manualClock) NewTimer(d time.Duration) Timer { return Real().NewTimer(d) }

// A queue group's term on a node that has read no quorum of clocks since
// it started waits for a reading before it stamps: counted from the epoch
// (a new group) or from the group's last stamp (a cluster back from a long
// stop), its log time would leap at the first reading. With a reading in
// hand it starts at once. Without one within LeaderWait, a group whose log
// has time, or a node whose metadata term set log time, goes on from
// there; a new group on a node with no time at all keeps waiting.
func TestTime_AGroupTermWaitsForAReading(t *testing.T) {
	const wall = 1_800_000_000_000
	newTime := func(leaderWait time.Duration) *Time {
		clk := &manualClock{}
		clk.set(wall)
		return New(Config{Self: "a", Clock: clk, MaxOffset: 500 * time.Millisecond, SampleInterval: time.Hour,
			LeaderWait: leaderWait, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}
	start := func(tm *Time, ctx context.Context, clock int64) <-chan bool {
		done := make(chan bool, 1)
		go func() { done <- tm.StartGroupTerm(ctx, clock) }()
		return done
	}
	read := func(tm *Time) {
		tm.q.mu.Lock()
		tm.q.voters = []string{"a"} // the only voter: its own clock is the quorum's
		tm.q.mu.Unlock()
	}
	// waits checks that a term keeps waiting through a round that reads
	// no quorum, until its ctx ends.
	waits := func(what string, tm *Time, clock int64) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		done := start(tm, ctx, clock)
		tm.q.rounds.Signal()
		cancel()
		if <-done {
			t.Fatalf("%s: the term started without a reading", what)
		}
	}

	waits("a new group", newTime(time.Hour), 0)
	waits("a group with log time", newTime(time.Hour), 5000)
	tm := newTime(time.Hour)
	tm.stamp.reset(7000)
	waits("a node with log time", tm, 0)

	// A reading arrives: the term starts, at the quorum's time.
	tm = newTime(time.Hour)
	done := start(tm, context.Background(), 0)
	read(tm)
	tm.q.rounds.Signal()
	if !<-done {
		t.Fatal("the term did not start after a reading")
	}
	if got := tm.Stamper().Next(); got < wall {
		t.Fatalf("stamped %d after a reading of %d", got, wall)
	}
	// With a reading in hand, the next term starts at once.
	if !<-start(tm, context.Background(), 0) {
		t.Fatal("a term with a reading in hand did not start")
	}

	// No reading within LeaderWait: a group with log time goes on from
	// it, and a node with log time starts a new group from its own.
	tm = newTime(10 * time.Millisecond)
	if !<-start(tm, context.Background(), 5000) {
		t.Fatal("a group with log time did not go on without a reading")
	}
	if got := tm.Stamper().Next(); got < 5000 || got >= wall {
		t.Fatalf("stamped %d, want the group's clock 5000 on", got)
	}
	tm = newTime(10 * time.Millisecond)
	tm.stamp.reset(7000)
	if !<-start(tm, context.Background(), 0) {
		t.Fatal("a node with log time did not start a new group without a reading")
	}
	if got := tm.Stamper().Next(); got < 7000 || got >= wall {
		t.Fatalf("stamped %d, want the node's log time 7000 on", got)
	}
}
