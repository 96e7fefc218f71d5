package e2e

import (
	"slices"
	"testing"
)

// FreeAddr never hands out one address twice in a process, though the
// kernel may give a port just released again: a cluster whose two nodes
// got the same port could not start.
func TestFreeAddr_NeverTheSameTwice(t *testing.T) {
	seen := map[string]bool{}
	for range 3000 {
		a := FreeAddr(t)
		if seen[a] {
			t.Fatalf("%s handed out twice", a)
		}
		seen[a] = true
	}
}

// A node takes none of the test process's RAFTMQ_ settings but its log
// level: a developer's RAFTMQ_QUEUE_GROUPS does not reshape every test.
func TestNodeEnv_LeavesOutTheBrokersSettings(t *testing.T) {
	got := nodeEnv([]string{"PATH=/bin", "RAFTMQ_QUEUE_GROUPS=per-node", "RAFTMQ_PLACE_QUEUES=true", "RAFTMQ_LOG_LEVEL=debug", "HOME=/h"})
	if want := []string{"PATH=/bin", "RAFTMQ_LOG_LEVEL=debug", "HOME=/h"}; !slices.Equal(got, want) {
		t.Fatalf("node env %v, want %v", got, want)
	}
}

// A failure's course keeps, from anywhere in a node's log, the lines of
// leaderships, barriers and failed commands, the last ones when there
// are more than it keeps; raft's chatter stays out.
func TestCourseLines_KeepTheLastEventsOnly(t *testing.T) {
	log := []byte("a gained leadership 1\nraft: appendEntries rejected\nqueue group barrier failed 2\ncommand failed 3\nnoise\n")
	if got, want := courseLines(log, 2), []string{"queue group barrier failed 2", "command failed 3"}; !slices.Equal(got, want) {
		t.Fatalf("course %q, want %q", got, want)
	}
	if got := courseLines([]byte("noise\n"), 5); len(got) != 0 {
		t.Fatalf("course of chatter: %q", got)
	}
}
