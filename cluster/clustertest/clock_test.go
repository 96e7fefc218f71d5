package clustertest

import (
	"testing"
	"time"
)

func TestFakeClock_TimersFireWhenDue(t *testing.T) {
	start := time.UnixMilli(1_000_000)
	c := NewFakeClock(start)
	a := c.NewTimer(100 * time.Millisecond)
	b := c.NewTimer(200 * time.Millisecond)
	stopped := c.NewTimer(50 * time.Millisecond)
	if !stopped.Stop() {
		t.Fatal("Stop of an active timer reported inactive")
	}
	fired := func(tm interface{ C() <-chan time.Time }) bool {
		select {
		case <-tm.C():
			return true
		default:
			return false
		}
	}
	c.Advance(99 * time.Millisecond)
	if fired(a) || fired(b) {
		t.Fatal("a timer fired early")
	}
	c.Advance(time.Millisecond)
	if !fired(a) || fired(b) {
		t.Fatal("only the 100 ms timer is due")
	}
	c.Set(start.Add(time.Hour + 100*time.Millisecond))
	c.Step(-time.Hour)
	if fired(b) {
		t.Fatal("stepping the wall clock fired a timer")
	}
	if got := c.Monotonic(); got != time.Hour+100*time.Millisecond {
		t.Fatalf("stepping the wall clock moved the monotonic reading to %v", got)
	}
	c.Advance(900 * time.Millisecond)
	if !fired(b) || fired(stopped) {
		t.Fatal("Advance fires due timers, never stopped ones")
	}
	if b.Stop() {
		t.Fatal("Stop of a fired timer reported active")
	}
	if !fired(c.NewTimer(0)) {
		t.Fatal("a zero timer fires at once")
	}
	if got := c.Now(); !got.Equal(start.Add(time.Second)) {
		t.Fatalf("Now %v", got)
	}
}
