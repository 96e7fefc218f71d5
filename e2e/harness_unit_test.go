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
