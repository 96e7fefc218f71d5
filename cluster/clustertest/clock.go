package clustertest

import (
	"sync"
	"time"

	"github.com/raftmq/raftmq/cluster/clock"
)

// FakeClock is a clock.Clock that moves only when told to. It has a wall
// reading and a monotonic one: Advance moves both (time passes, at
// whatever rate the test says this node's oscillator runs), Set and Step
// move only the wall clock (an operator or NTP stepping it). Timers run
// on the monotonic reading, as Go's do.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	mono   time.Duration
	timers map[*fakeTimer]struct{}
}

var _ clock.Clock = (*FakeClock)(nil)

// NewFakeClock returns a fake clock showing start.
func NewFakeClock(start time.Time) *FakeClock {
	return &FakeClock{now: start, mono: time.Hour, timers: map[*fakeTimer]struct{}{}}
}

// Now implements clock.Clock.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Monotonic implements clock.Clock.
func (c *FakeClock) Monotonic() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mono
}

// NewTimer implements clock.Clock: the timer fires when the clock is
// advanced by d or more.
func (c *FakeClock) NewTimer(d time.Duration) clock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{clock: c, ch: make(chan time.Time, 1), at: c.mono + d}
	if d <= 0 {
		t.ch <- c.now
		return t
	}
	c.timers[t] = struct{}{}
	return t
}

// Advance lets d pass: both readings move forward by d, and the timers
// that fell due fire.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.mono += d
	c.fire()
}

// Set sets the wall clock to t (possibly backwards). The monotonic reading
// and the timers do not move.
func (c *FakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Step moves the wall clock by d (negative: backwards), as Set does.
func (c *FakeClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fire delivers every due timer. Locks: c.mu held.
func (c *FakeClock) fire() {
	for t := range c.timers {
		if t.at <= c.mono {
			delete(c.timers, t)
			t.ch <- c.now
		}
	}
}

type fakeTimer struct {
	clock *FakeClock
	ch    chan time.Time
	at    time.Duration
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	_, active := t.clock.timers[t]
	delete(t.clock.timers, t)
	return active
}
