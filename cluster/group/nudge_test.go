package group

import (
	"context"
	"testing"
	"time"
)

// With a commit timeout far longer than the test, followers still apply
// each entry at once: the leader's barrier after the burst tells them of
// the commit (nudge.go). Without it they would wait for the timeout.
func TestNudge_FollowersApplyABurstsLastEntryWithoutTheCommitTimeout(t *testing.T) {
	saved := muxTestTimings
	muxTestTimings.CommitTimeout = time.Hour
	t.Cleanup(func() { muxTestTimings = saved })
	nodes := startMuxCluster(t, []string{DefaultID})
	for i, name := range []string{"a", "b", "c"} {
		f := leaderOf(t, nodes, DefaultID).Raft().Apply(vhostEntry(t, name), 10*time.Second)
		if err := f.Error(); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		for _, n := range nodes {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			err := n.groups[DefaultID].Applied().Wait(ctx, nil, f.Index())
			cancel()
			if err != nil {
				t.Fatalf("%s did not apply entry %d (index %d) within 20 s: %v", n.id, i, f.Index(), err)
			}
		}
	}
}
