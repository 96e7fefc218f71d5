// Package clock is a node's time: the Clock it reads, the stamper that
// hands out log time (Stamper), and the watch over the voters' wall
// clocks that log time is anchored to and that decides whether this
// node's clock is fit to lead (Time). It knows the cluster only through
// what the node gives it (Config).
package clock

import "time"

// Clock is the source of time for the leader's stamps and the leader-only
// schedulers. Tests inject a fake one.
type Clock interface {
	// Now is the current wall time: what an operator or NTP may step.
	Now() time.Time
	// Monotonic is the time elapsed since an arbitrary origin on a clock
	// nobody sets (it may run fast or slow, but it never jumps). Log time
	// advances by it (stamp.go).
	Monotonic() time.Duration
	// NewTimer starts a timer that fires once after d of monotonic time.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer of a Clock.
type Timer interface {
	// C delivers the time when the timer fires.
	C() <-chan time.Time
	// Stop stops the timer; it reports whether the timer was active.
	Stop() bool
}

// Real returns the wall clock.
func Real() Clock { return realClock{} }

type realClock struct{}

// processStart carries Go's monotonic reading: time.Since subtracts the
// monotonic readings, never the wall times.
var processStart = time.Now()

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Monotonic() time.Duration { return time.Since(processStart) }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }
