package amqp

import (
	"context"
	"sync"
	"time"

	"github.com/raftmq/raftmq/internal/procstat"
)

// MemoryBlockedReason is the reason connection.blocked gives when the
// memory high-water mark is passed (RabbitMQ's text).
const MemoryBlockedReason = "low on memory"

// MemoryWatcher blocks the server's publishers while memory in use is
// above a high-water mark, like RabbitMQ's vm_memory_high_watermark
// alarm: Block when a check finds usage at or above the mark, Unblock when
// a later check finds it below.
//
// Usage is the process's resident memory (procstat.ResidentMemory), the
// figure /api/nodes, rabbitmqctl status and the metrics show: the Go heap
// is only part of it, so an alarm on the heap let the memory an operator
// reads pass the mark with publishers still flowing.
type MemoryWatcher struct {
	srv   *Server
	limit uint64
	read  func() uint64

	mu    sync.Mutex
	alarm bool
	used  uint64
}

// NewMemoryWatcher watches read (procstat.ResidentMemory when nil) against
// limit bytes.
func NewMemoryWatcher(srv *Server, limit uint64, read func() uint64) *MemoryWatcher {
	if read == nil {
		read = procstat.ResidentMemory
	}
	return &MemoryWatcher{srv: srv, limit: limit, read: read}
}

// Check reads memory once, raises or clears the alarm, and reports
// whether the alarm is raised.
func (w *MemoryWatcher) Check() bool {
	used := w.read()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.used = used
	switch {
	case !w.alarm && used >= w.limit:
		w.alarm = true
		w.srv.log.Warn("memory high-water mark passed: publishers blocked", "resident_bytes", used, "limit_bytes", w.limit)
		w.srv.SetAlarm(AlarmMemory, true)
	case w.alarm && used < w.limit:
		w.alarm = false
		w.srv.log.Info("memory back under the high-water mark: publishers unblocked", "resident_bytes", used, "limit_bytes", w.limit)
		w.srv.SetAlarm(AlarmMemory, false)
	}
	return w.alarm
}

// State returns the memory in use at the last check (0 before any), the
// limit and whether the alarm is raised: the surfaces show this reading,
// so the figure an operator reads is the one the alarm compared.
func (w *MemoryWatcher) State() (used, limit uint64, alarm bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.used, w.limit, w.alarm
}

// Run checks every interval until ctx is done.
func (w *MemoryWatcher) Run(ctx context.Context, interval time.Duration) {
	checkEvery(ctx, interval, func() { w.Check() })
}
