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
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
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

// BenchmarkExpiryLateness measures how late messages die: bursts of 1 KiB
// messages with a 200 ms TTL are published in batches of 100, and each
// message's death is the first Expire entry naming its queue stamped at or
// after its deadline. It reports the lateness of the Expire stamps (log
// time) and how long after its deadline (wall time) the queue was empty.
// It needs the real state machine.
func BenchmarkExpiryLateness(b *testing.B) {
	const ttl, burst, batch = 200, 2000, 100
	c := benchCluster(b)
	l := c.Leader()
	body := string(make([]byte, 1024))
	var late []time.Duration
	var drained []time.Duration
	b.ResetTimer()
	for it := range b.N {
		q := fmt.Sprintf("ttl-%d", it)
		res, err := l.Submit(context.Background(), declareWithArgs(q, int32Arg("x-message-ttl", ttl)))
		if err != nil {
			b.Fatal(err)
		}
		if res.GetCode() == 540 {
			b.Skip("fsm answers 540 NOT_IMPLEMENTED")
		}
		var pubIdx []uint64
		for range burst / batch {
			cmds := make([]*proto.Command, batch)
			for i := range cmds {
				cmds[i] = publishTo(q, body)
			}
			res, err := l.SubmitBatch(context.Background(), cmds)
			if err != nil {
				b.Fatal(err)
			}
			pubIdx = append(pubIdx, res[0].GetIndex())
		}
		var lastDeadline int64
		stampOf := map[uint64]int64{}
		var expires []stampedCmd
		waitEmpty := func() {
			for {
				var ok bool
				l.View(func(m *fsm.Machine) { _, ok = m.NextDeadline() })
				if !ok {
					return
				}
				time.Sleep(time.Millisecond)
			}
		}
		waitEmpty()
		emptyAt := time.Now()
		_ = l.LogEntries(func(i uint64, env *proto.Envelope) bool {
			stampOf[i] = env.GetStampMs()
			for _, cmd := range env.GetCommands() {
				if isExpireOf(q)(cmd) {
					expires = append(expires, stampedCmd{i, env.GetStampMs(), cmd})
				}
			}
			return true
		})
		for _, pi := range pubIdx {
			deadline := stampOf[pi] + ttl
			lastDeadline = max(lastDeadline, deadline)
			for _, e := range expires {
				if e.index > pi && e.stamp >= deadline {
					for range batch {
						late = append(late, time.Duration(e.stamp-deadline)*time.Millisecond)
					}
					break
				}
			}
		}
		drained = append(drained, emptyAt.Sub(time.UnixMilli(lastDeadline)))
	}
	b.StopTimer()
	if len(late) == 0 {
		return
	}
	slices.Sort(late)
	slices.Sort(drained)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(late[len(late)/2]), "late-p50-ms")
	b.ReportMetric(ms(late[len(late)*99/100]), "late-p99-ms")
	b.ReportMetric(ms(late[len(late)-1]), "late-max-ms")
	b.ReportMetric(ms(drained[len(drained)-1]), "drained-after-last-deadline-ms")
}
