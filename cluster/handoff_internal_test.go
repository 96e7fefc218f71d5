package cluster

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster/group"
)

// A round whose outcome a deposed leader left unknown, after the wait
// such a failure takes, goes again at once and leaves the backoff as it
// was; an unknown outcome that came at once, a node that closes and
// every other failure double the backoff up to its bound. So a group
// that changes leaders twice does not hold its dead letters back by
// seconds, and a stream that breaks as soon as it is sent on is not tried
// in a loop.
func TestRetryAfter_AnUnknownOutcomeGoesAgainAtOnce(t *testing.T) {
	unknown := fmt.Errorf("to group %q: %w", "q1", fmt.Errorf("%w: forwarding to raftmq1: leader changed to raftmq3", group.ErrOutcomeUnknown))
	noLeader := fmt.Errorf("to group %q: %w", "q1", errors.New("cluster: no leader"))
	closed := fmt.Errorf("to group %q: %w", "q1", fmt.Errorf("%w: %w", group.ErrClosed, group.ErrOutcomeUnknown))
	const deposed, broke = 300 * time.Millisecond, time.Millisecond // how long the failed round took

	type round struct {
		err  error
		took time.Duration
	}
	var backoff time.Duration
	var waits []time.Duration
	for _, r := range []round{{noLeader, broke}, {noLeader, deposed}, {unknown, deposed}, {unknown, deposed},
		{unknown, broke}, {noLeader, deposed}, {noLeader, broke}, {noLeader, broke}, {closed, deposed}} {
		var wait time.Duration
		wait, backoff = retryAfter(r.err, r.took, backoff)
		waits = append(waits, wait)
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 0, 0,
		400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second, time.Second}
	if !slices.Equal(waits, want) {
		t.Fatalf("waits %v, want %v", waits, want)
	}
}
