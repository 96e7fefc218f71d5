package amqp

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"
)

// Resources raising alarms, in RabbitMQ's words for connection.blocked's
// reason ("low on memory", "low on disk", "low on disk & memory").
const (
	AlarmMemory = "memory"
	AlarmDisk   = "disk"
)

// SetAlarm raises or clears a resource alarm. While any alarm is raised
// publishers are blocked (Block), with a reason naming every raised
// resource as RabbitMQ does; clearing the last one unblocks them.
func (s *Server) SetAlarm(resource string, raised bool) {
	s.alarmMu.Lock()
	defer s.alarmMu.Unlock()
	if s.alarms == nil {
		s.alarms = map[string]bool{}
	}
	if s.alarms[resource] == raised {
		return
	}
	if raised {
		s.alarms[resource] = true
	} else {
		delete(s.alarms, resource)
	}
	if len(s.alarms) == 0 {
		s.Unblock()
		return
	}
	names := make([]string, 0, len(s.alarms))
	for r := range s.alarms {
		names = append(names, r)
	}
	slices.Sort(names)
	reason := "low on " + strings.Join(names, " & ")
	s.mu.Lock()
	if s.isBlocked {
		// Connections opened from now on are told the new reason; those
		// blocked already stay blocked.
		s.blocked = reason
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.Block(reason)
}

// Alarms returns the raised resource alarms, sorted.
func (s *Server) Alarms() []string {
	s.alarmMu.Lock()
	defer s.alarmMu.Unlock()
	out := make([]string, 0, len(s.alarms))
	for r := range s.alarms {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// DiskWatcher raises the disk alarm while the free space of a folder (the
// node's data dir) is below a limit, like RabbitMQ's disk_free_limit:
// checked periodically, cleared when a later check finds the space back.
type DiskWatcher struct {
	srv   *Server
	dir   string
	limit uint64
	free  func(dir string) (uint64, error)

	mu      sync.Mutex
	last    uint64
	known   bool
	alarm   bool
	lastErr string
}

// NewDiskWatcher watches dir's free space (read with free, DiskFree when
// nil) against limit bytes.
func NewDiskWatcher(srv *Server, dir string, limit uint64, free func(string) (uint64, error)) *DiskWatcher {
	if free == nil {
		free = DiskFree
	}
	return &DiskWatcher{srv: srv, dir: dir, limit: limit, free: free}
}

// Check reads the free space once, raises or clears the alarm, and
// reports whether the alarm is raised. A folder whose free space cannot be
// read leaves the alarm as it was.
func (w *DiskWatcher) Check() bool {
	free, err := w.free(w.dir)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		if msg := err.Error(); msg != w.lastErr {
			w.lastErr = msg
			w.srv.log.Warn("cannot read the data dir's free disk space", "dir", w.dir, "err", err)
		}
		return w.alarm
	}
	w.lastErr = ""
	w.last, w.known = free, true
	switch {
	case !w.alarm && free < w.limit:
		w.alarm = true
		w.srv.log.Warn("free disk space below the limit: publishers blocked", "free_bytes", free, "limit_bytes", w.limit, "dir", w.dir)
		w.srv.SetAlarm(AlarmDisk, true)
	case w.alarm && free >= w.limit:
		w.alarm = false
		w.srv.log.Info("free disk space back above the limit: publishers unblocked", "free_bytes", free, "limit_bytes", w.limit)
		w.srv.SetAlarm(AlarmDisk, false)
	}
	return w.alarm
}

// State returns the last free space read (ok false before any), the limit
// and whether the alarm is raised.
func (w *DiskWatcher) State() (free, limit uint64, alarm, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last, w.limit, w.alarm, w.known
}

// Run checks every interval until ctx is done.
func (w *DiskWatcher) Run(ctx context.Context, interval time.Duration) {
	checkEvery(ctx, interval, func() { w.Check() })
}

// checkEvery runs check at once and then every interval until ctx is done.
func checkEvery(ctx context.Context, interval time.Duration, check func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		check()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
