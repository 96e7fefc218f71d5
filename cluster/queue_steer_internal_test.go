package cluster

import (
	"testing"
	"time"
)

// A group's leadership goes back to the member meant to lead only once
// that member has been online for the wait without a break and this
// node has led that long, and then at most once per wait: a member that
// flaps, online one round and not the next, never gets it.
func TestSteer_HandBackWaitsOutFlapping(t *testing.T) {
	const wait = 10 * time.Second
	start := time.Unix(1000, 0)
	at := func(s int) time.Time { return start.Add(time.Duration(s) * time.Second) }
	st := steer{ledSince: start}
	for s := 0; s < 60; s++ {
		if st.due(at(s), wait, "a", "b", s%2 == 0) {
			t.Fatalf("handed to a flapping member at %d s", s)
		}
	}
	for s := 60; s < 70; s++ {
		if st.due(at(s), wait, "a", "b", true) {
			t.Fatalf("handed at %d s, online since 60 s", s)
		}
	}
	if !st.due(at(70), wait, "a", "b", true) {
		t.Fatal("not handed after the wait")
	}
	// Led again (the transfer failed, or came back): the next hand-over
	// waits for the wait after the last.
	for s := 71; s < 80; s++ {
		if st.due(at(s), wait, "a", "b", true) {
			t.Fatalf("handed again at %d s", s)
		}
	}
	if !st.due(at(80), wait, "a", "b", true) {
		t.Fatal("not handed a wait after the last")
	}
	// A leader that is the member meant to lead keeps it.
	if st.due(at(200), wait, "b", "b", true) {
		t.Fatal("handed to itself")
	}
	// A leader that took the group while meant was online all along
	// (a new group's first election) hands it over once it settled,
	// the first time. Led again with meant online all along (the
	// transfer lost), it hands over again after twice the settle, then
	// four times, and after that no sooner than the wait.
	fresh := steer{ledSince: at(300), onlineSince: at(0), meant: "b"}
	if fresh.due(at(301), wait, "a", "b", true) || !fresh.due(at(300).Add(leadershipSettle), wait, "a", "b", true) {
		t.Fatal("a first leader's settle")
	}
	for k, hold := range []time.Duration{2 * leadershipSettle, 4 * leadershipSettle, wait, wait} {
		led := at(400 + 100*k)
		fresh.ledSince = led
		if fresh.due(led.Add(hold-time.Millisecond), wait, "a", "b", true) || !fresh.due(led.Add(hold), wait, "a", "b", true) {
			t.Fatalf("hand-over %d not held for %v", k+2, hold)
		}
	}
	// Meant came online after this node took the group: the whole wait.
	back := steer{ledSince: at(500)}
	for s := 501; s < 511; s++ {
		if back.due(at(s), wait, "a", "b", true) {
			t.Fatalf("handed at %d s to a member online since 501 s", s)
		}
	}
	if !back.due(at(511), wait, "a", "b", true) {
		t.Fatal("not handed a wait after the member came back")
	}
}
