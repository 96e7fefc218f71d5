package procstat

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
)

// CPU is the CPU time the process has used so far, user and system (the
// kernel's work in its calls included): what benchmarks report per
// operation beside the wall time.
func CPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// residentMemory reads the second field of /proc/self/statm, resident
// pages.
func residentMemory() (uint64, bool) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, false
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseUint(string(f[1]), 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * uint64(os.Getpagesize()), true
}
