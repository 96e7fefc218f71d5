package amqp

import (
	"context"
	"runtime/metrics"
	"sync"
	"time"
)

// MemoryBlockedReason is the reason connection.blocked gives when the
// memory high-water mark is passed (RabbitMQ's text).
const MemoryBlockedReason = "low on memory"

// heapMetric is the Go heap's bytes in objects, live and not yet swept.
const heapMetric = "/memory/classes/heap/objects:bytes"

// HeapBytes returns the bytes the Go heap holds in objects, read with
// runtime/metrics (cheap: no stop-the-world).
func HeapBytes() uint64 {
	s := []metrics.Sample{{Name: heapMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// MemoryWatcher blocks the server's publishers while memory in use is
// above a high-water mark, like RabbitMQ's vm_memory_high_watermark
// alarm: Block when a check finds usage at or above the mark, Unblock when
// a later check finds it below.
type MemoryWatcher struct {
	srv   *Server
	limit uint64
	read  func() uint64

	mu    sync.Mutex
	alarm bool
}

// NewMemoryWatcher watches read (HeapBytes when nil) against limit bytes.
func NewMemoryWatcher(srv *Server, limit uint64, read func() uint64) *MemoryWatcher {
	if read == nil {
		read = HeapBytes
	}
	return &MemoryWatcher{srv: srv, limit: limit, read: read}
}

// Check reads memory once, raises or clears the alarm, and reports
// whether the alarm is raised.
func (w *MemoryWatcher) Check() bool {
	used := w.read()
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case !w.alarm && used >= w.limit:
		w.alarm = true
		w.srv.log.Warn("memory high-water mark passed: publishers blocked", "heap_bytes", used, "limit_bytes", w.limit)
		w.srv.SetAlarm(AlarmMemory, true)
	case w.alarm && used < w.limit:
		w.alarm = false
		w.srv.log.Info("memory back under the high-water mark: publishers unblocked", "heap_bytes", used, "limit_bytes", w.limit)
		w.srv.SetAlarm(AlarmMemory, false)
	}
	return w.alarm
}

// Alarm reports whether the alarm is raised.
func (w *MemoryWatcher) Alarm() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.alarm
}

// Run checks every interval until ctx is done.
func (w *MemoryWatcher) Run(ctx context.Context, interval time.Duration) {
	checkEvery(ctx, interval, func() { w.Check() })
}
