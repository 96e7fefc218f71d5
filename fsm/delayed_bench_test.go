package fsm_test

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

// BenchmarkDelayedMemory reports the heap held per delayed message
// (bytes/delayed, live after a collection), the growth of the
// collector's goal per message (gc-goal/delayed) and, where /proc tells it, the
// growth of resident anonymous memory per message (rss-anon/delayed)
// and the time apply took per message (apply-ns/delayed),
// with 100,000 and 1,000,000 messages waiting, each with a delay of its
// own; at level 8 each delay made the message's properties its own.
func BenchmarkDelayedMemory(b *testing.B) {
	for _, level := range []uint32{8, fsm.Protocol} {
		for _, n := range []int{100000, 1000000} {
			b.Run(fmt.Sprintf("level%d/%d", level, n), func(b *testing.B) { delayedMemory(b, n, level) })
		}
	}
}

func delayedMemory(b *testing.B, n int, level uint32) {
	m := fsmtest.NewAt(b, level)
	res, _ := fsmtest.Apply(b, m, 1000, delayedX("dx", "direct"), declare("q", nil), bind("dx", "q", "k", false, nil))
	for _, r := range res {
		mustOK(b, r)
	}
	cmds := make([]*proto.Command, 1000)
	delays := make([]*proto.Value, 1000)
	for i := range cmds {
		delays[i] = i64(0)
		cmds[i] = publish("dx", "k", "", withDelay(delays[i]))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rss0, rssOK := rssAnon()
	var applying time.Duration
	for i := 0; i < n/1000; i++ {
		for j, d := range delays {
			d.Kind = &proto.Value_Int64{Int64: 60000 + int64(i*1000+j)}
		}
		start := time.Now()
		m.Apply(fsm.Entry{Index: m.AppliedIndex() + 1, Envelope: &proto.Envelope{StampMs: 1000, Commands: cmds}}, nil)
		applying += time.Since(start)
	}
	b.ReportMetric(float64(applying.Nanoseconds())/float64(n), "apply-ns/delayed")
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "bytes/delayed")
	b.ReportMetric(float64(after.NextGC-before.NextGC)/float64(n), "gc-goal/delayed")
	if rss1, ok := rssAnon(); ok && rssOK {
		b.ReportMetric(float64(rss1-rss0)/float64(n), "rss-anon/delayed")
	}
	runtime.KeepAlive(m)
}

// rssAnon reads the process's resident anonymous memory (bytes) from
// /proc/self/status.
func rssAnon() (int64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "RssAnon:" && f[2] == "kB" {
			if k, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				return k << 10, true
			}
		}
	}
	return 0, false
}

// BenchmarkReleaseDelayed releases DelayedReleaseBatch messages due at
// once into a queue with a consumer, as one leader proposal does.
func BenchmarkReleaseDelayed(b *testing.B) {
	m := delayedSetup(b, "direct")
	fsmtest.One(b, m, 1000, consume("q", "c", ch1, 0))
	cmds := make([]*proto.Command, 0, fsm.DelayedReleaseBatch)
	for i := 0; i < fsm.DelayedReleaseBatch; i++ {
		cmds = append(cmds, publish("dx", "k", "", withDelay(i64(10))))
	}
	release := &proto.Envelope{Commands: []*proto.Command{fsmtest.ReleaseDelayed(fsm.DelayedReleaseBatch)}}
	ack := &proto.Envelope{Commands: []*proto.Command{settle(ch1, 0, true)}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		now := int64(2000 + 100*i)
		m.Apply(fsm.Entry{Index: m.AppliedIndex() + 1, Envelope: &proto.Envelope{StampMs: now, Commands: cmds}}, nil)
		release.StampMs = now + 10
		b.StartTimer()
		m.Apply(fsm.Entry{Index: m.AppliedIndex() + 1, Envelope: release}, nil)
		b.StopTimer()
		ack.StampMs = now + 10
		m.Apply(fsm.Entry{Index: m.AppliedIndex() + 1, Envelope: ack}, nil)
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*fsm.DelayedReleaseBatch), "ns/message")
}
