package clock

import (
	"testing"
	"time"
)

// The estimate is the q-th highest of the clocks read: a minority of
// clocks ahead or behind moves it by nothing, a bare quorum read takes the
// lower clock and says the clocks do not agree, and voters of an earlier
// release (no Clock method) leave the leader's own clock as the estimate.
func TestQuorumClock_Estimate(t *testing.T) {
	clk := &manualClock{}
	clk.set(1_000_000)
	c := newQuorumClock(Config{Self: "a", Clock: clk, MaxOffset: 500 * time.Millisecond})
	ms := func(v int64) int64 { return v * int64(time.Millisecond) }
	set := func(voters []string, offsets map[string]int64, legacy ...string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.voters = voters
		c.samples = map[string]clockSample{}
		c.legacy = map[string]bool{}
		for id, o := range offsets {
			c.samples[id] = clockSample{offset: ms(o), at: time.Now()}
		}
		for _, id := range legacy {
			c.legacy[id] = true
		}
	}
	own := int64(1_000_000) // this node's wall clock minus its monotonic (0)
	hour := time.Hour.Milliseconds()
	for _, tc := range []struct {
		name    string
		voters  []string
		offsets map[string]int64
		legacy  []string
		ok      bool
		want    int64
		agreed  bool
		isOld   bool
	}{
		{"all agree", []string{"a", "b", "c"}, map[string]int64{"b": own + 10, "c": own - 10}, nil, true, own, true, false},
		{"one peer an hour ahead", []string{"a", "b", "c"}, map[string]int64{"b": own + hour, "c": own}, nil, true, own, true, false},
		{"one peer an hour behind", []string{"a", "b", "c"}, map[string]int64{"b": own - hour, "c": own + 5}, nil, true, own, true, false},
		{"this node an hour ahead", []string{"a", "b", "c"}, map[string]int64{"b": own - hour, "c": own - hour + 5}, nil, true, own - hour + 5, true, false},
		{"bare quorum apart", []string{"a", "b", "c"}, map[string]int64{"b": own - hour}, nil, true, own - hour, false, false},
		{"bare quorum close", []string{"a", "b", "c"}, map[string]int64{"b": own + 100}, nil, true, own, true, false},
		{"no quorum", []string{"a", "b", "c"}, nil, nil, false, 0, false, false},
		{"five voters, two ahead", []string{"a", "b", "c", "d", "e"}, map[string]int64{"b": own + hour, "c": own + hour, "d": own, "e": own}, nil, true, own, true, false},
		{"earlier release", []string{"a", "b", "c"}, nil, []string{"b"}, true, own, false, true},
		{"alone", []string{"a"}, nil, nil, true, own, true, false},
	} {
		set(tc.voters, tc.offsets, tc.legacy...)
		e := c.estimate()
		if e.ok != tc.ok || (tc.ok && (e.offset != ms(tc.want) || e.agreed != tc.agreed || e.legacy != tc.isOld)) {
			t.Errorf("%s: estimate %+v, want ok %v offset %d agreed %v legacy %v", tc.name, e, tc.ok, ms(tc.want), tc.agreed, tc.isOld)
		}
	}
	// A stale reading does not count.
	set([]string{"a", "b", "c"}, map[string]int64{"b": own, "c": own})
	c.mu.Lock()
	c.samples["b"] = clockSample{offset: ms(own), at: time.Now().Add(-time.Minute)}
	c.mu.Unlock()
	if e := c.estimate(); !e.ok || e.agreed != true {
		t.Errorf("two fresh of three: %+v", e)
	}
	c.mu.Lock()
	c.samples["c"] = clockSample{offset: ms(own), at: time.Now().Add(-time.Minute)}
	c.mu.Unlock()
	if e := c.estimate(); e.ok {
		t.Errorf("one fresh of three: %+v", e)
	}
}

// A reading is off by up to half its round trip: a peer that read its
// clock late in a slow call (a request that waited, an answer that did
// not) looks ahead by up to that much. When the clocks of the leader and
// its peers agree, log time must not run ahead of them on such a reading:
// a delayed message would then be released before its due time on every
// clock (the delayed-message fault scenario saw releases up to 47 ms
// early on a loaded machine). A clock truly off still reads off.
func TestQuorumClock_ReadingWithinItsRoundTrip(t *testing.T) {
	clk := &manualClock{}
	clk.set(1_000_000)
	c := newQuorumClock(Config{Self: "a", Clock: clk, MaxOffset: 500 * time.Millisecond})
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	own := clk.Now().UnixNano() - int64(clk.Monotonic())
	// Each peer's clock agrees with this node's; the calls took 80 and
	// 120 ms, sent at monotonic -100 ms and -150 ms, and each peer read
	// its clock at the very end of the call.
	readAt := func(m1 time.Duration) int64 { return own + int64(m1) }
	c.mu.Lock()
	c.voters = []string{"a", "b", "c"}
	c.samples = map[string]clockSample{
		"b": reading(readAt(-ms(20)), -ms(100), -ms(20)),
		"c": reading(readAt(-ms(30)), -ms(150), -ms(30)),
	}
	c.mu.Unlock()
	if e := c.estimate(); !e.ok || e.offset != own {
		t.Errorf("clocks that agree, read in slow calls: estimate %v ahead of them (ok %v), want 0",
			time.Duration(e.offset-own), e.ok)
	}
	// Both peers an hour ahead, read within 100 ms: the quorum's clocks
	// are an hour ahead, give or take half the round trip.
	hour := int64(time.Hour)
	c.mu.Lock()
	c.samples = map[string]clockSample{
		"b": reading(own+hour-int64(ms(50)), -ms(100), 0),
		"c": reading(own+hour-int64(ms(50)), -ms(100), 0),
	}
	c.mu.Unlock()
	if e := c.estimate(); !e.ok || e.offset < own+hour-int64(ms(100)) || e.offset > own+hour {
		t.Errorf("peers an hour ahead: estimate %v from this clock, want an hour within the round trip", time.Duration(e.offset-own))
	}
}
