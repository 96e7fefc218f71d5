package group

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestSilenceCheck_AFollowerChecksAtTheTimeoutAfterItsLastContact(t *testing.T) {
	const hb, jitter = 500 * time.Millisecond, 20 * time.Millisecond
	last := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		name      string
		state     raft.RaftState
		last      time.Time
		since     time.Duration
		nudge     bool
		wantAfter time.Duration
	}{
		{"heard from just now", raft.Follower, last, 0, false, hb + jitter},
		{"heard from 300 ms ago: look again when it is silent for the timeout", raft.Follower, last, 300 * time.Millisecond, false, 200*time.Millisecond + jitter},
		{"a nanosecond short of the timeout", raft.Follower, last, hb - time.Nanosecond, false, time.Nanosecond + jitter},
		{"silent for the timeout", raft.Follower, last, hb, true, hb + jitter},
		{"silent for a minute", raft.Follower, last, time.Minute, true, hb + jitter},
		{"never heard from a leader: raft's own timer", raft.Follower, time.Time{}, time.Minute, false, hb + jitter},
		{"a leader has none to lose", raft.Leader, last, time.Minute, false, hb + jitter},
		{"a candidate already stood", raft.Candidate, last, time.Minute, false, hb + jitter},
		{"shut down", raft.Shutdown, last, time.Minute, false, hb + jitter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nudge, next := silenceCheck(tc.state, tc.last, last.Add(tc.since), hb, jitter)
			if nudge != tc.nudge || next != tc.wantAfter {
				t.Fatalf("silenceCheck = %v, %v; want %v, %v", nudge, next, tc.nudge, tc.wantAfter)
			}
		})
	}
}
