package group

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestSilenceCheck_AFollowerChecksAtTheTimeoutAfterItsLastContact(t *testing.T) {
	const wait = 500 * time.Millisecond
	last := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		name      string
		state     raft.RaftState
		last      time.Time
		since     time.Duration
		nudge     bool
		wantAfter time.Duration
	}{
		{"heard from just now", raft.Follower, last, 0, false, wait},
		{"heard from 300 ms ago: look again when it is silent for the wait", raft.Follower, last, 300 * time.Millisecond, false, 200 * time.Millisecond},
		{"a nanosecond short of the wait", raft.Follower, last, wait - time.Nanosecond, false, time.Nanosecond},
		{"silent for the wait", raft.Follower, last, wait, true, wait},
		{"silent for a minute", raft.Follower, last, time.Minute, true, wait},
		{"never heard from a leader: raft's own timer", raft.Follower, time.Time{}, time.Minute, false, wait},
		{"a leader has none to lose: looked at again when its state changes", raft.Leader, last, time.Minute, false, leaderRecheck * wait},
		{"a candidate already stood", raft.Candidate, last, time.Minute, false, leaderRecheck * wait},
		{"shut down", raft.Shutdown, last, time.Minute, false, leaderRecheck * wait},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nudge, next := silenceCheck(tc.state, tc.last, last.Add(tc.since), wait)
			if nudge != tc.nudge || next != tc.wantAfter {
				t.Fatalf("silenceCheck = %v, %v; want %v, %v", nudge, next, tc.nudge, tc.wantAfter)
			}
		})
	}
}

// The followers stand in the order of the configuration's voters, in a
// ring that starts after the silent leader: each has its own place, all
// agree on it, and who stands first moves with the leader.
func TestStandOrder_TheVotersInARingFromTheLeader(t *testing.T) {
	voter := func(id string) raft.Server { return raft.Server{ID: raft.ServerID(id), Suffrage: raft.Voter} }
	five := []raft.Server{voter("a"), voter("b"), voter("c"), voter("d"), voter("e")}
	for _, tc := range []struct {
		servers []raft.Server
		leader  string
		want    map[string]int
	}{
		{five, "a", map[string]int{"b": 0, "c": 1, "d": 2, "e": 3}},
		{five, "c", map[string]int{"d": 0, "e": 1, "a": 2, "b": 3}},
		{five, "e", map[string]int{"a": 0, "b": 1, "c": 2, "d": 3}},
		{five[:3], "b", map[string]int{"c": 0, "a": 1}},
		// No leader known: from the first voter.
		{five[:3], "", map[string]int{"a": 0, "b": 1, "c": 2}},
		// A non-voter is left out of the ring and stands last.
		{[]raft.Server{voter("a"), {ID: "x", Suffrage: raft.Nonvoter}, voter("b"), voter("c")}, "a",
			map[string]int{"b": 0, "c": 1, "x": 2}},
	} {
		seen := map[int]string{}
		for self, want := range tc.want {
			got := standOrder(tc.servers, raft.ServerID(self), raft.ServerID(tc.leader))
			if got != want {
				t.Errorf("leader %q: %s stands %d, want %d", tc.leader, self, got, want)
			}
			if other, dup := seen[got]; dup {
				t.Errorf("leader %q: %s and %s both stand %d", tc.leader, self, other, got)
			}
			seen[got] = self
		}
	}
}

// A candidacy's timeouts are the lease timeout, when that shortens the
// election timeout and raft's checks allow it; else the configured ones.
func TestCandidateTimeouts_TheLeaseWhereItShortensTheElection(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		t            RaftTimings
		hb, election time.Duration
	}{
		{RaftTimings{HeartbeatTimeout: 500 * ms, ElectionTimeout: 500 * ms, LeaderLeaseTimeout: 250 * ms}, 250 * ms, 250 * ms},
		{RaftTimings{HeartbeatTimeout: 1000 * ms, ElectionTimeout: 1000 * ms, LeaderLeaseTimeout: 500 * ms}, 500 * ms, 500 * ms},
		{RaftTimings{HeartbeatTimeout: 500 * ms, ElectionTimeout: 500 * ms, LeaderLeaseTimeout: 500 * ms}, 500 * ms, 500 * ms},
		{RaftTimings{HeartbeatTimeout: 500 * ms, ElectionTimeout: 500 * ms}, 500 * ms, 500 * ms},
		{RaftTimings{HeartbeatTimeout: 200 * ms, ElectionTimeout: 500 * ms, LeaderLeaseTimeout: 300 * ms}, 200 * ms, 500 * ms},
	} {
		hb, election := candidateTimeouts(tc.t)
		if hb != tc.hb || election != tc.election {
			t.Errorf("%+v: %v and %v, want %v and %v", tc.t, hb, election, tc.hb, tc.election)
		}
	}
}

// A leader's silence watch has nothing to watch: it sleeps until its
// raft's state changes rather than waking every heartbeat timeout, and
// once the raft follows again (here after handing its leadership over)
// it watches at once.
func TestWatchSilence_ALeaderSleepsUntilItFollows(t *testing.T) {
	const hb = 250 * time.Millisecond
	timings := RaftTimings{HeartbeatTimeout: hb, ElectionTimeout: hb, LeaderLeaseTimeout: hb / 2,
		CommitTimeout: 5 * time.Millisecond, SnapshotThreshold: 8192, SnapshotInterval: time.Minute, TrailingLogs: 1024}
	leader := awaitLeader(t, inmemGroups(t, timings, nil))
	// The window is what is measured: how often the watch looks while
	// nothing changes.
	before := leader.silenceChecks.Load()
	time.Sleep(6 * hb)
	if n := leader.silenceChecks.Load() - before; n > 1 || leader.Raft().State() != raft.Leader {
		t.Fatalf("the leader's watch looked %d times in %v (state %v), want at most 1", n, 6*hb, leader.Raft().State())
	}

	before = leader.silenceChecks.Load()
	if err := leader.TransferLeadership("", "").Error(); err != nil {
		t.Fatal(err)
	}
	handed := time.Now()
	// As a follower it looks at once and then every heartbeat timeout;
	// a watch that learnt of the change only at its recheck (eight
	// timeouts) would not have looked twice before four.
	for leader.silenceChecks.Load()-before < 2 {
		if time.Since(handed) > 4*hb {
			t.Fatalf("the watch looked %d times in the %v after its raft gave up leading (state %v)",
				leader.silenceChecks.Load()-before, 4*hb, leader.Raft().State())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
