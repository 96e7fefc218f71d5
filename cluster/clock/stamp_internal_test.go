package clock

import (
	"context"
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

// A queue group's term on a node whose log time nothing set yet (no
// reading of the quorum's clocks, no log with time) waits for a reading
// before it stamps: counted from the epoch, its first stamps would be of
// 1970. A node with log time, or a group whose log has time, stamps at
// once.
func TestTime_AGroupTermWaitsForLogTime(t *testing.T) {
	const wall = 1_800_000_000_000
	newTime := func() *Time {
		clk := &manualClock{}
		clk.set(wall)
		return New(Config{Self: "a", Clock: clk, MaxOffset: 500 * time.Millisecond, SampleInterval: time.Hour, LeaderWait: time.Hour})
	}
	start := func(tm *Time, ctx context.Context, clock int64) <-chan bool {
		done := make(chan bool, 1)
		go func() { done <- tm.StartGroupTerm(ctx, clock) }()
		return done
	}

	// No reading: a round that reads no quorum does not start it; the
	// term ends waiting.
	tm := newTime()
	ctx, cancel := context.WithCancel(context.Background())
	done := start(tm, ctx, 0)
	tm.q.rounds.Signal()
	cancel()
	if <-done {
		t.Fatal("a group term started with no log time")
	}

	// A reading arrives (this node is the only voter): it starts, at the
	// quorum's time.
	tm = newTime()
	done = start(tm, context.Background(), 0)
	tm.q.mu.Lock()
	tm.q.voters = []string{"a"}
	tm.q.mu.Unlock()
	tm.q.rounds.Signal()
	if !<-done {
		t.Fatal("a group term did not start after a reading")
	}
	if got := tm.Stamper().Next(); got < wall {
		t.Fatalf("stamped %d after a reading of %d", got, wall)
	}

	// A group whose log has time, or a node that led a log with time,
	// starts at once, from that time.
	tm = newTime()
	if !<-start(tm, context.Background(), 5000) {
		t.Fatal("a group with log time did not start")
	}
	if got := tm.Stamper().Next(); got < 5000 {
		t.Fatalf("stamped %d, below the group's clock 5000", got)
	}
	tm = newTime()
	tm.stamp.reset(7000)
	if !<-start(tm, context.Background(), 0) {
		t.Fatal("a node with log time did not start a new group")
	}
}
