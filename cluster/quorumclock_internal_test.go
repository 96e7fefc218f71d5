package cluster

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
	c := newQuorumClock(Config{NodeID: "a", Clock: clk, MaxClockOffset: 500 * time.Millisecond})
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
