package ttl

import (
	"math"
	"testing"
)

func TestEffectiveEveryCombination(t *testing.T) {
	// seeds/000: "When both a per-queue and a per-message TTL are specified,
	// the lower value between the two will be chosen."
	// seeds/002: "TTL settings also can be enforced by operator policies."
	// Every subset of {argument, policy, operator policy, expiration} is
	// tried, with the values in each of the 24 orders of the four slots.
	values := [4]int64{5000, 3000, 7000, 0} // argument, policy, operator, expiration
	for mask := 0; mask < 16; mask++ {
		want := None
		for i := range 4 {
			if mask&(1<<i) != 0 && (!want.Set || values[i] < want.V) {
				want = Some(values[i])
			}
		}
		for _, perm := range permutations(4) {
			opts := make([]Opt, 4)
			for slot, i := range perm {
				if mask&(1<<i) != 0 {
					opts[slot] = Some(values[i])
				}
			}
			if got := Effective(opts...); got != want {
				t.Fatalf("mask %04b order %v: got %+v, want %+v", mask, perm, got, want)
			}
		}
	}
}

func TestEffectiveCases(t *testing.T) {
	cases := []struct {
		seed string
		in   []Opt
		want Opt
	}{
		{`seeds/000: "When both a per-queue and a per-message TTL are specified, the lower value between the two will be chosen."`, []Opt{Some(60000), Some(100)}, Some(100)},
		{`seeds/003: "A message with Expiration: "100" will expire in 100ms even if the queue has x-message-ttl: 10000"`, []Opt{Some(10000), Some(100)}, Some(100)},
		{`seeds/001: "When both per-message and per-queue TTL are set, the lower of the two applies." (queue lower)`, []Opt{Some(100), Some(60000)}, Some(100)},
		{`seeds/000: "Setting the TTL to 0 causes messages to be expired upon reaching a queue" (0 is a value, not absence)`, []Opt{Some(0), Some(1000)}, Some(0)},
		{`seeds/000: no TTL anywhere: the message never dies`, []Opt{None, None, None, None}, None},
		{`seeds/000: no TTL anywhere: the message never dies`, nil, None},
		{`seeds/002: "TTL settings also can be enforced by operator policies." (operator caps the policy)`, []Opt{None, Some(60000), Some(30000), None}, Some(30000)},
		{`seeds/000: an absent value with a garbage V is ignored`, []Opt{{V: -7}, Some(9)}, Some(9)},
	}
	for _, c := range cases {
		if got := Effective(c.in...); got != c.want {
			t.Errorf("%s: Effective(%v) = %+v, want %+v", c.seed, c.in, got, c.want)
		}
	}
}

func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append([]int{}, p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	return out
}

func TestDeadlineAndLease(t *testing.T) {
	cases := []struct {
		seed       string
		fn         func(a, b int64) int64
		a, b, want int64
	}{
		{`seeds/000: "a value of 1000 means that a message added to the queue will live in the queue for 1 second"`, Deadline, 1_700_000_000_000, 1000, 1_700_000_001_000},
		{`seeds/000: "Setting the TTL to 0 causes messages to be expired upon reaching a queue"`, Deadline, 1_700_000_000_000, 0, 1_700_000_000_000},
		{`seeds/004: "(0 <= n <= 2^32-1)" and log time near the end of int64 saturates`, Deadline, math.MaxInt64 - 10, MaxTTL, math.MaxInt64},
		{`seeds/000: negative TTLs never reach here; one counts as 0`, Deadline, 500, -20, 500},
		{`seeds/000: "a value of 1000 means a queue which is unused for 1 second will be deleted."`, LeaseDue, 1_700_000_000_000, 1000, 1_700_000_001_000},
		{`seeds/000: lease arithmetic saturates like deadlines`, LeaseDue, math.MaxInt64 - 1, 2, math.MaxInt64},
	}
	for _, c := range cases {
		if got := c.fn(c.a, c.b); got != c.want {
			t.Errorf("%s: f(%d, %d) = %d, want %d", c.seed, c.a, c.b, got, c.want)
		}
	}
}

func TestDeadlineOfAndExpired(t *testing.T) {
	// seeds/000: "A message that has been in the queue for longer than the
	// configured TTL is said to be dead." and "The server guarantees that
	// dead messages will not be included in any basic.get-ok or
	// basic.deliver methods." A message with deadline D is dead at D.
	if got := DeadlineOf(1000, None); got != NoDeadline {
		t.Errorf("DeadlineOf without TTL = %d, want NoDeadline", got)
	}
	if got := DeadlineOf(1000, Some(250)); got != 1250 {
		t.Errorf("DeadlineOf(1000, 250) = %d, want 1250", got)
	}
	d := Deadline(1000, 250)
	for _, c := range []struct {
		now  int64
		dead bool
	}{{1249, false}, {1250, true}, {1251, true}, {math.MaxInt64, true}} {
		if got := Expired(d, c.now); got != c.dead {
			t.Errorf("Expired(%d, %d) = %v, want %v", d, c.now, got, c.dead)
		}
	}
	if Expired(NoDeadline, math.MaxInt64-1) {
		t.Error("NoDeadline expired before the end of time")
	}
}
