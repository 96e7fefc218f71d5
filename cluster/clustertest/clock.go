package clustertest

import (
	"sync"
	"time"

	"github.com/raftmq/raftmq/cluster"
)

// FakeClock is a cluster.Clock that moves only when told to.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*fakeTimer]struct{}
}

var _ cluster.Clock = (*FakeClock)(nil)

// NewFakeClock returns a fake clock showing start.
func NewFakeClock(start time.Time) *FakeClock {
	return &FakeClock{now: start, timers: map[*fakeTimer]struct{}{}}
}

// Now implements cluster.Clock.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer implements cluster.Clock: the timer fires when the clock is
// advanced or set to its deadline or later.
func (c *FakeClock) NewTimer(d time.Duration) cluster.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{clock: c, ch: make(chan time.Time, 1), at: c.now.Add(d)}
	if d <= 0 {
		t.ch <- c.now
		return t
	}
	c.timers[t] = struct{}{}
	return t
}

// Advance moves the clock forward by d and fires the timers that fell due.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.fire()
}

// Set moves the clock to t (possibly backwards) and fires the timers that
// fell due.
func (c *FakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
	c.fire()
}

// fire delivers every due timer. Locks: c.mu held.
func (c *FakeClock) fire() {
	for t := range c.timers {
		if !t.at.After(c.now) {
			delete(c.timers, t)
			t.ch <- c.now
		}
	}
}

type fakeTimer struct {
	clock *FakeClock
	ch    chan time.Time
	at    time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	_, active := t.clock.timers[t]
	delete(t.clock.timers, t)
	return active
}
