//go:build !linux

package procstat

import "time"

// CPU is the process's CPU time where the platform gives it; 0 here.
func CPU() time.Duration { return 0 }

// residentMemory has no portable source outside Linux's /proc; the caller
// falls back to the Go runtime's figure.
func residentMemory() (uint64, bool) { return 0, false }
