//go:build !linux

package procstat

// residentMemory has no portable source outside Linux's /proc; the caller
// falls back to the Go runtime's figure.
func residentMemory() (uint64, bool) { return 0, false }
