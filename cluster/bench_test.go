package cluster_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
)

// benchCluster is a 3-node cluster with production raft timings except
// for faster elections.
func benchCluster(b *testing.B, opts ...clustertest.Option) *clustertest.Cluster {
	c := clustertest.New(b, 3, opts...)
	c.WaitForLeader(clustertest.Timeout)
	return c
}

// BenchmarkSubmit measures group commit: callers concurrent submitters of
// one 1 KiB publish each, on the leader or forwarded from a follower.
func BenchmarkSubmit(b *testing.B) {
	body := string(make([]byte, 1024))
	for _, via := range []string{"leader", "follower"} {
		for _, callers := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("via=%s/callers=%d", via, callers), func(b *testing.B) {
				c := benchCluster(b, clustertest.WithConfig(func(_ int, cfg *cluster.Config) {
					if v := os.Getenv("RAFTMQ_BENCH_INFLIGHT"); v != "" {
						cfg.MaxInflightEntries, _ = strconv.Atoi(v)
					}
				}))
				l := c.Leader()
				n := l
				if via == "follower" {
					n = c.Followers()[0]
				}
				cmd := publish("/", "q", body)
				// Warm up the forwarding stream and the leader.
				if _, err := n.Submit(context.Background(), cmd); err != nil {
					b.Fatal(err)
				}
				first := l.Stats().LastLogIndex
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				errs := make(chan error, callers)
				for w := range callers {
					k := b.N / callers
					if w < b.N%callers {
						k++
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range k {
							if _, err := n.Submit(context.Background(), cmd); err != nil {
								errs <- err
								return
							}
						}
					}()
				}
				wg.Wait()
				el := time.Since(start)
				b.StopTimer()
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
				entries := float64(l.Stats().LastLogIndex - first)
				b.ReportMetric(float64(b.N)/el.Seconds(), "cmds/s")
				b.ReportMetric(entries/el.Seconds(), "entries/s")
				b.ReportMetric(float64(b.N)/max(entries, 1), "cmds/entry")
			})
		}
	}
}

// BenchmarkFollowerApplyLag measures how long after the leader applied an
// entry (its Submit returned) a follower has applied it too, under light
// load (one submission at a time).
func BenchmarkFollowerApplyLag(b *testing.B) {
	c := benchCluster(b, clustertest.WithConfig(func(_ int, cfg *cluster.Config) {
		if v := os.Getenv("RAFTMQ_BENCH_COMMIT_TIMEOUT"); v != "" {
			cfg.CommitTimeout, _ = time.ParseDuration(v)
		}
	}))
	l := c.Leader()
	fs := c.Followers()
	lags := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		res, err := l.Submit(context.Background(), tick())
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		lag := time.Duration(0)
		for _, f := range fs {
			if err := f.WaitApplied(context.Background(), res.GetIndex()); err != nil {
				b.Fatal(err)
			}
			lag = max(lag, time.Since(t0))
		}
		lags = append(lags, lag)
	}
	b.StopTimer()
	reportLags(b, lags)
}

func reportLags(b *testing.B, lags []time.Duration) {
	if len(lags) == 0 {
		return
	}
	slices.Sort(lags)
	var sum time.Duration
	for _, l := range lags {
		sum += l
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(us(sum/time.Duration(len(lags))), "lag-mean-µs")
	b.ReportMetric(us(lags[len(lags)/2]), "lag-p50-µs")
	b.ReportMetric(us(lags[len(lags)*99/100]), "lag-p99-µs")
}
