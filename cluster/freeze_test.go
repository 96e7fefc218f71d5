package cluster_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
)

// A frozen leader keeps its forwarding streams open and answers nothing.
// Publishing through a follower must resume about an election after the
// freeze: commands in flight to the old leader end as outcome unknown when
// the follower learns of the new leader, and new ones go to the new leader.
func TestCluster_FrozenLeaderForwardingResumesAtOnce(t *testing.T) {
	c := clustertest.New(t, 3)
	old := c.WaitForLeader(clustertest.Timeout)
	followers := c.Followers()
	for _, f := range followers {
		mustSubmit(t, f, tick())
	}

	type outcome struct {
		resumed time.Duration // first commit after the freeze, from the freeze
		unknown int
		other   error
	}
	var (
		mu     sync.Mutex
		frozen time.Time
		out    = map[string]*outcome{}
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, f := range followers {
		out[f.NodeID()] = &outcome{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := f.Submit(ctxT(t, 15*time.Second), tick())
				mu.Lock()
				o := out[f.NodeID()]
				switch {
				case err == nil:
					if !frozen.IsZero() && o.resumed == 0 {
						o.resumed = time.Since(frozen)
					}
				case errors.Is(err, cluster.ErrOutcomeUnknown):
					o.unknown++
				default:
					o.other = err
				}
				mu.Unlock()
			}
		}()
	}
	mu.Lock()
	frozen = time.Now()
	c.Freeze(old.NodeID())
	mu.Unlock()
	defer c.Heal()

	clustertest.Eventually(t, clustertest.Timeout, func() error {
		mu.Lock()
		defer mu.Unlock()
		for id, o := range out {
			if o.resumed == 0 {
				return errors.New(id + " has not committed since the freeze")
			}
		}
		return nil
	})
	close(stop)
	wg.Wait()
	for id, o := range out {
		t.Logf("%s: publishing resumed %v after the leader froze (%d outcome-unknown)", id, o.resumed.Round(time.Millisecond), o.unknown)
		if o.resumed > 2*time.Second {
			t.Errorf("%s: publishing resumed only %v after the leader froze", id, o.resumed)
		}
	}
	c.Heal()
	c.WaitForLeader(clustertest.Timeout)
	for _, n := range c.Live() {
		mustSubmit(t, n, tick())
	}
	c.AssertSameDigest(t)
}
