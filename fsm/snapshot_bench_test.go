package fsm_test

import (
	"io"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

// BenchmarkSnapshotHold measures what a snapshot costs the apply
// goroutine: "hold" is Machine.Snapshot, which raft calls on its FSM
// goroutine with no apply running meanwhile (hold-ms, the median of the
// runs, and hold-max-ms, the worst), and "encode" is WriteTo, which raft
// runs on its snapshot goroutine while applies go on. With 500,000 and
// 5,000,000 queued messages in one queue, and 1,000,000 delayed ones.
func BenchmarkSnapshotHold(b *testing.B) {
	for _, n := range []int{500_000, 5_000_000} {
		b.Run("queued="+strconv.Itoa(n), func(b *testing.B) { snapshotHold(b, queued(b, n)) })
	}
	b.Run("delayed=1000000", func(b *testing.B) {
		m := delayedSetup(b, "direct")
		cmds := make([]*proto.Command, 1000)
		delays := make([]*proto.Value, 1000)
		for i := range cmds {
			delays[i] = i64(0)
			cmds[i] = publish("dx", "k", "", withDelay(delays[i]))
		}
		for i := 0; i < 1000; i++ {
			for j, d := range delays {
				d.Kind = &proto.Value_Int64{Int64: 60000 + int64((i*1000+j)*7919%1_000_000)}
			}
			m.Apply(fsm.Entry{Index: m.AppliedIndex() + 1, Envelope: &proto.Envelope{StampMs: 1000, Commands: cmds}}, nil)
		}
		snapshotHold(b, m)
	})
}

func snapshotHold(b *testing.B, m *fsm.Machine) {
	b.Run("hold", func(b *testing.B) {
		var took []time.Duration
		for i := 0; i < b.N; i++ {
			start := time.Now()
			w, err := m.Snapshot()
			took = append(took, time.Since(start))
			if err != nil {
				b.Fatal(err)
			}
			if r, ok := w.(fsm.Releaser); ok {
				r.Release()
			}
		}
		sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
		b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "hold-ms")
		b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "hold-max-ms")
	})
	b.Run("encode", func(b *testing.B) {
		var size int64
		for i := 0; i < b.N; i++ {
			w, err := m.Snapshot()
			if err != nil {
				b.Fatal(err)
			}
			if size, err = w.WriteTo(io.Discard); err != nil {
				b.Fatal(err)
			}
			if r, ok := w.(fsm.Releaser); ok {
				r.Release()
			}
		}
		b.ReportMetric(float64(size), "bytes")
	})
}

// BenchmarkSnapshotUnderLoad writes a snapshot of 500,000 queued messages
// while the machine applies, as fast as it can, entries of 100 publishes
// to the backlogged queue and an ack of everything its consumer
// (prefetch 1,000) holds, every tenth entry a requeue of it instead;
// "ttl" gives the queue an x-message-ttl, so that every message is in its
// expiry index. It reports what the state copied because the snapshot
// shared it (blocks, copied-MB), the entries applied beside the encoding
// and the longest of them (apply-max-ms).
func BenchmarkSnapshotUnderLoad(b *testing.B) {
	b.Run("fifo", func(b *testing.B) { snapshotUnderLoad(b, nil) })
	b.Run("ttl", func(b *testing.B) { snapshotUnderLoad(b, table("x-message-ttl", i64(3_600_000))) })
}

func snapshotUnderLoad(b *testing.B, args *proto.Table) {
	const n = 500_000
	m := fsmtest.New(b)
	fsmtest.One(b, m, 2, declare("q", args))
	fill := persistentBatch(1000)
	for j := 0; j < n; j += len(fill) {
		m.Apply(entry(m, 3, fill...), fsm.DiscardSink{})
	}
	batch := persistentBatch(100)
	fsmtest.One(b, m, 3, consume("q", "c", ch1, 1000))
	load := append(append([]*proto.Command(nil), batch...), settle(ch1, 0, true))
	back := append(append([]*proto.Command(nil), batch...), requeue(ch1, 0, true))
	var entries int
	var worst time.Duration
	blocks0, bytes0 := m.CopiedOnWrite()
	for i := 0; i < b.N; i++ {
		w, err := m.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := w.WriteTo(io.Discard)
			done <- err
		}()
	apply:
		for k := 0; ; k++ {
			select {
			case err := <-done:
				if err != nil {
					b.Fatal(err)
				}
				break apply
			default:
			}
			cmds := load
			if k%10 == 9 {
				cmds = back
			}
			start := time.Now()
			m.Apply(entry(m, 4, cmds...), fsm.DiscardSink{})
			worst = max(worst, time.Since(start))
			entries++
		}
		w.(fsm.Releaser).Release()
	}
	blocks, bytes := m.CopiedOnWrite()
	b.ReportMetric(float64(blocks-blocks0)/float64(b.N), "blocks")
	b.ReportMetric(float64(bytes-bytes0)/float64(b.N)/(1<<20), "copied-MB")
	b.ReportMetric(float64(entries)/float64(b.N), "entries")
	b.ReportMetric(float64(worst.Microseconds())/1000, "apply-max-ms")
}

// BenchmarkSnapshotBodies is the list of bodies a snapshot names, which
// the node builds on raft's snapshot goroutine beside the applies: its
// time and what it allocates, with every queued message's body in the
// log (persistent publishes).
func BenchmarkSnapshotBodies(b *testing.B) {
	for _, n := range []int{1_000_000, 5_000_000} {
		b.Run("queued="+strconv.Itoa(n), func(b *testing.B) {
			m := queued(b, n)
			w, err := m.Snapshot()
			if err != nil {
				b.Fatal(err)
			}
			defer w.(fsm.Releaser).Release()
			bl := w.(fsm.BodyLister)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if got := len(fsm.Bodies(bl)); got != n {
					b.Fatalf("%d bodies, want %d", got, n)
				}
			}
		})
	}
}
