package cluster

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster/group"
)

// A round whose outcome a deposed leader left unknown goes again at once
// and leaves the backoff as it was; other failures double it up to its
// bound, so a group that changes leaders twice does not hold its dead
// letters back by seconds.
func TestRetryAfter_AnUnknownOutcomeGoesAgainAtOnce(t *testing.T) {
	unknown := fmt.Errorf("to group %q: %w", "q1", fmt.Errorf("%w: forwarding to raftmq1: leader changed to raftmq3", group.ErrOutcomeUnknown))
	noLeader := fmt.Errorf("to group %q: %w", "q1", errors.New("cluster: no leader"))
	closed := fmt.Errorf("to group %q: %w", "q1", fmt.Errorf("%w: %w", group.ErrClosed, group.ErrOutcomeUnknown))

	var backoff time.Duration
	var waits []time.Duration
	for _, err := range []error{noLeader, noLeader, unknown, unknown, noLeader, noLeader, noLeader, noLeader, noLeader, closed} {
		var wait time.Duration
		wait, backoff = retryAfter(err, backoff)
		waits = append(waits, wait)
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 0, 0,
		400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second, time.Second, time.Second}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("waits %v, want %v", waits, want)
		}
	}
}
