// Package procstat reads the raftmq process's own resource use, as the
// management API's /api/nodes and the Prometheus metrics report it.
package procstat

import (
	"runtime"
	"time"

	"github.com/prometheus/procfs"
)

// ResidentMemory is the process's resident set size in bytes: what the
// operating system holds in RAM for it, the figure top and ps show and the
// one RabbitMQ reports (its "rss" memory calculation strategy). The Go heap
// is only part of it: goroutine stacks, the runtime's own structures, the
// mapped binary and freed memory not yet returned are the rest.
//
// On Linux it comes from /proc/self/statm. Elsewhere, or when /proc cannot
// be read, it is the memory the Go runtime obtained from the operating
// system (runtime.MemStats.Sys), which leaves out the binary's text and
// may count freed pages the OS has taken back.
func ResidentMemory() uint64 {
	if n, ok := residentMemory(); ok {
		return n
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.Sys
}

// started approximates the process's start: package initialisation runs
// before main.
var started = time.Now()

// Uptime is how long the process has run.
func Uptime() time.Duration { return time.Since(started) }

// FileDescriptors returns the process's open file descriptors and their
// limit where /proc gives them (ok false elsewhere).
func FileDescriptors() (open, max uint64, ok bool) {
	p, err := procfs.Self()
	if err != nil {
		return 0, 0, false
	}
	n, err := p.FileDescriptorsLen()
	if err != nil {
		return 0, 0, false
	}
	l, err := p.Limits()
	if err != nil || l.OpenFiles <= 0 {
		return 0, 0, false
	}
	return uint64(n), l.OpenFiles, true
}
