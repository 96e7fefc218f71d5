package fsm_test

import (
	"bytes"
	"io"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
)

func entry(m *fsm.Machine, stamp int64, cmds ...*proto.Command) fsm.Entry {
	return fsm.Entry{Index: m.AppliedIndex() + 1, Envelope: &proto.Envelope{StampMs: stamp, Commands: cmds}}
}

func BenchmarkApplyPublish(b *testing.B) {
	m := fsmtest.New(b)
	fsmtest.One(b, m, 2, declare("q", nil))
	body := make([]byte, 1024)
	cmd := &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: "q", Body: body, Channel: ch1}}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.Apply(entry(m, 3, cmd), fsm.DiscardSink{})
	}
}

// BenchmarkApplyEnqueue is BenchmarkApplyPublish's message put into its
// queue pre-routed, as a queue group applies it.
func BenchmarkApplyEnqueue(b *testing.B) {
	m := fsmtest.New(b)
	fsmtest.One(b, m, 2, declare("q", nil))
	cmd := &proto.Command{Cmd: &proto.Command_Enqueue{Enqueue: &proto.Enqueue{Vhost: "/", RoutingKey: "q",
		Body: make([]byte, 1024), Queues: []string{"q"}, Channel: ch1}}}
	b.ReportAllocs()
	for b.Loop() {
		m.Apply(entry(m, 3, cmd), fsm.DiscardSink{})
	}
}

// BenchmarkApplyHandOff applies hand-offs of ascending keys (the floor
// moves) and, in /duplicate, one key again and again (each changes
// nothing).
func BenchmarkApplyHandOff(b *testing.B) {
	for name, dup := range map[string]bool{"fresh": false, "duplicate": true} {
		b.Run(name, func(b *testing.B) {
			m := fsmtest.New(b)
			fsmtest.One(b, m, 2, declare("q", nil))
			h := &proto.HandOff{SourceGroup: 1, Key: 1, DeadLettered: true,
				Message: &proto.Enqueue{Vhost: "/", Exchange: "dlx", RoutingKey: "q", Body: make([]byte, 1024), Queues: []string{"q"}}}
			cmd := &proto.Command{Cmd: &proto.Command_HandOff{HandOff: h}}
			b.ReportAllocs()
			for b.Loop() {
				m.Apply(entry(m, 3, cmd), fsm.DiscardSink{})
				if !dup {
					h.Key++
				}
			}
		})
	}
}

func BenchmarkApplySettle(b *testing.B) {
	m := fsmtest.New(b)
	fsmtest.One(b, m, 2, declare("q", nil))
	fsmtest.One(b, m, 2, consume("q", "c", ch1, 0))
	pub := &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: "q", Body: make([]byte, 64), Channel: ch1}}}
	for i := 0; i < b.N; i++ {
		m.Apply(entry(m, 3, pub), fsm.DiscardSink{})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.Apply(entry(m, 3, settle(ch1, uint64(i+1), false)), fsm.DiscardSink{})
	}
}

func BenchmarkExpireMillion(b *testing.B) {
	const n = 1_000_000
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		m := fsmtest.New(b)
		fsmtest.One(b, m, 2, declare("q", table("x-message-ttl", i64(60000))))
		body := make([]byte, 16)
		exps := []string{"100", "5000", "20000"}
		batch := make([]*proto.Command, 0, 1000)
		for j := 0; j < n; j++ {
			var props *proto.Properties
			if j%4 != 0 {
				props = &proto.Properties{Expiration: &exps[j%3]}
			}
			batch = append(batch, &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: "q", Body: body, Properties: props}}})
			if len(batch) == cap(batch) {
				m.Apply(entry(m, 3, batch...), fsm.DiscardSink{})
				batch = batch[:0]
			}
		}
		b.StartTimer()
		m.Apply(entry(m, 100000, expire("q")), fsm.DiscardSink{})
		b.StopTimer()
		if qi, _ := m.Queue("/", "q"); qi.GetReady() != 0 {
			b.Fatalf("%d left", qi.GetReady())
		}
	}
}

// BenchmarkQueuedMessageMemory reports the heap bytes one queued 1 KiB
// message costs the state machine (its body stays in the log entry).
func BenchmarkQueuedMessageMemory(b *testing.B) {
	const n = 20000
	for i := 0; i < b.N; i++ {
		m := fsmtest.New(b)
		fsmtest.One(b, m, 2, declare("q", nil))
		runtime.GC()
		var before, after runtime.MemStats
		b.StopTimer() // the wait for unmapping is not the benchmark's
		off := offHeapSettled()
		b.StartTimer()
		runtime.ReadMemStats(&before)
		for j := 0; j < n; j += 100 {
			cmds := make([]*proto.Command, 100)
			for k := range cmds {
				cmds[k] = &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: "q", Body: make([]byte, 1024),
					Properties: &proto.Properties{MessageId: ptr("id-" + strconv.Itoa(j+k))}}}}
			}
			m.Apply(entry(m, 3, cmds...), fsm.DiscardSink{})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "B/msg")
		b.ReportMetric(float64(offHeapUsed()-off)/n, "offheap-B/msg")
		runtime.KeepAlive(m)
	}
}

// offHeapSettled is offHeapUsed once the slabs of the states the last
// collection found unreachable are unmapped (runtime cleanups, which run
// after it on a goroutine of their own): unchanged for 100 ms.
func offHeapSettled() int64 {
	runtime.GC()
	last, same := offHeapUsed(), 0
	for range 500 {
		time.Sleep(10 * time.Millisecond)
		now := offHeapUsed()
		if now != last {
			last, same = now, 0
		} else if same++; same == 10 {
			break
		}
	}
	return last
}

// offHeapUsed is the bytes of the record blocks the queues hold outside
// the heap (queue/slab.go): what of their slabs is resident.
func offHeapUsed() int64 {
	_, used := queue.OffHeap()
	return used
}

// BenchmarkSnapshot measures a snapshot of 100,000 and of 1,000,000
// queued 1 KiB messages: "take" is what runs under the state lock
// (Machine.Snapshot), "write" the encoding raft runs outside it, which
// reports the snapshot's size. Bodies stay in the log, so neither grows
// with the bytes queued.
func BenchmarkSnapshot(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) { benchSnapshot(b, n) })
	}
}

func benchSnapshot(b *testing.B, n int) {
	m := fsmtest.New(b)
	fsmtest.One(b, m, 2, declare("q", nil))
	fill(m, "q", n)
	b.Run("take", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := m.Snapshot(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("write", func(b *testing.B) {
		w, err := m.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		var size int64
		for i := 0; i < b.N; i++ {
			if size, err = w.WriteTo(io.Discard); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(size), "bytes")
	})
}

// fill publishes n persistent 1 KiB messages to queue, 1,000 an entry.
func fill(m *fsm.Machine, queue string, n int) {
	body := make([]byte, 1024)
	batch := make([]*proto.Command, 0, 1000)
	for j := 0; j < n; j++ {
		batch = append(batch, &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: queue, Body: body,
			Properties: &proto.Properties{DeliveryMode: ptr(uint32(2))}}}})
		if len(batch) == cap(batch) {
			m.Apply(entry(m, 3, batch...), fsm.DiscardSink{})
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		m.Apply(entry(m, 3, batch...), fsm.DiscardSink{})
	}
}

// BenchmarkApplyPublishAck is a queue consumed as fast as it is
// published: each publish (with a message-id of its own, as most clients
// send) is delivered to the consumer and acknowledged in the next entry,
// so the queue is empty between two messages.
func BenchmarkApplyPublishAck(b *testing.B) {
	m := fsmtest.New(b)
	fsmtest.One(b, m, 2, declare("q", nil))
	fsmtest.One(b, m, 2, consume("q", "c", ch1, 100))
	props := &proto.Properties{DeliveryMode: new(uint32(2))}
	pub := &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: "q", Body: make([]byte, 1024),
		Properties: props, Channel: ch1}}}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		props.MessageId = new("m-" + strconv.Itoa(i))
		m.Apply(entry(m, 3, pub), fsm.DiscardSink{})
		m.Apply(entry(m, 3, settle(ch1, uint64(i+1), false)), fsm.DiscardSink{})
	}
}

// BenchmarkApplySettleWindow acks one delivery at a time by explicit tag,
// oldest first, with 1,100 deliveries assigned to the channel (prefetch
// 100 with the default look-ahead), as a consumer's node sends them.
func BenchmarkApplySettleWindow(b *testing.B) {
	const window = 1100
	m := fsmtest.New(b)
	fsmtest.One(b, m, 2, declare("q", nil))
	fsmtest.One(b, m, 2, consume("q", "c", ch1, window))
	pub := &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: "q", Body: make([]byte, 64), Channel: ch1}}}
	for i := 0; i < b.N+window; i++ {
		m.Apply(entry(m, 3, pub), fsm.DiscardSink{})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ack := settle(ch1, 0, false)
		ack.GetSettle().Tags = []uint64{uint64(i + 1)}
		m.Apply(entry(m, 3, ack), fsm.DiscardSink{})
	}
}

// BenchmarkQueuedMillion fills one queue with 1,000,000 queued 1 KiB
// persistent messages as raftmq-perf publishes them (same properties,
// 1,000 publishes an entry) and reports what stays on the heap per
// message ("B/msg", after a collection), the allocations per publish
// applied ("allocs/msg") and how long a forced collection takes with them
// queued ("gc-ms"), which is the collector's marking of the backlog.
func BenchmarkQueuedMillion(b *testing.B) {
	const n = 1_000_000
	for i := 0; i < b.N; i++ {
		m := fsmtest.New(b)
		fsmtest.One(b, m, 2, declare("q", nil))
		batch := persistentBatch(1000)
		gcMs := func() float64 {
			start := time.Now()
			runtime.GC()
			return float64(time.Since(start).Microseconds()) / 1000
		}
		runtime.GC()
		idle := gcMs()
		var before, after runtime.MemStats
		b.StopTimer() // the wait for unmapping is not the benchmark's
		off := offHeapSettled()
		b.StartTimer()
		runtime.ReadMemStats(&before)
		for j := 0; j < n; j += len(batch) {
			m.Apply(entry(m, 3, batch...), fsm.DiscardSink{})
		}
		runtime.ReadMemStats(&after)
		allocs := float64(after.Mallocs-before.Mallocs) / n
		runtime.GC()
		full := gcMs()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "B/msg")
		b.ReportMetric(float64(offHeapUsed()-off)/n, "offheap-B/msg")
		b.ReportMetric(allocs, "allocs/msg")
		b.ReportMetric(full, "gc-ms")
		b.ReportMetric(idle, "gc-idle-ms")
		runtime.KeepAlive(m)
	}
}

// BenchmarkRestoreQueued restores a snapshot of 5,000,000 queued 1 KiB
// messages (one queue), as a node restarting with that backlog does
// before it serves, and reports the snapshot's size and the heap the
// restored state holds per message.
func BenchmarkRestoreQueued(b *testing.B) {
	const n = 5_000_000
	m := queued(b, n)
	w, err := m.Snapshot()
	if err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		b.Fatal(err)
	}
	snap := buf.Bytes()
	m, w = nil, nil
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		off := offHeapSettled()
		r := fsm.New()
		b.StartTimer()
		if err := r.RestoreBytes(snap); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		if qi, _ := r.Queue("/", "q"); qi.GetReady() != n {
			b.Fatalf("%d restored", qi.GetReady())
		}
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "B/msg")
		b.ReportMetric(float64(offHeapUsed()-off)/n, "offheap-B/msg")
		b.ReportMetric(float64(len(snap)), "snapshot-bytes")
		runtime.KeepAlive(r)
		b.StartTimer()
	}
}

// persistentBatch is n persistent 1 KiB publishes to queue q, one body
// shared: an entry's worth for the backlog benchmarks.
// queued is a machine holding n queued 1 KiB persistent messages in queue
// q, published 1,000 an entry.
func queued(b *testing.B, n int) *fsm.Machine {
	m := fsmtest.New(b)
	fsmtest.One(b, m, 2, declare("q", nil))
	batch := persistentBatch(1000)
	for j := 0; j < n; j += len(batch) {
		m.Apply(entry(m, 3, batch...), fsm.DiscardSink{})
	}
	return m
}

func persistentBatch(n int) []*proto.Command {
	batch := make([]*proto.Command, n)
	body := make([]byte, 1024)
	for k := range batch {
		batch[k] = &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: "q", Body: body,
			Properties: &proto.Properties{DeliveryMode: ptr(uint32(2))}}}}
	}
	return batch
}

// BenchmarkDueScansAfterApply is what a leader's due loops cost per
// applied entry with many queues: the entry (a publish into a queue
// without TTL), then the next death and the next lease asked, as
// cluster/due.go asks after every apply. 1 in 100 queues holds a message
// with a deadline, 1 in 50 has a lease.
func BenchmarkDueScansAfterApply(b *testing.B) {
	for _, n := range []int{1000, 8000} {
		b.Run(strconv.Itoa(n)+"-queues", func(b *testing.B) {
			m := fsmtest.New(b)
			exp := "600000"
			for i := range n {
				name := "q" + strconv.Itoa(i)
				var args *proto.Table
				if i%50 == 1 {
					args = table("x-expires", i64(3600000))
				}
				fsmtest.One(b, m, 2, declare(name, args))
				if i%100 == 0 {
					fsmtest.One(b, m, 2, publish("", name, "x", &proto.Properties{Expiration: &exp}))
				}
			}
			cmd := &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: "q7", Body: []byte("x"), Channel: ch1}}}
			b.ReportAllocs()
			for b.Loop() {
				m.Apply(entry(m, 3, cmd), fsm.DiscardSink{})
				if _, ok := m.NextDeadline(); !ok {
					b.Fatal("no deadline")
				}
				if _, ok := m.NextLeaseDue(); !ok {
					b.Fatal("no lease")
				}
			}
		})
	}
}
