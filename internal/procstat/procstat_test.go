package procstat

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// vmRSS reads VmRSS from /proc/self/status, a second source of the same
// figure as statm.
func vmRSS(t *testing.T) uint64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Skip("no VmRSS in /proc/self/status")
	return 0
}

// TestResidentMemoryIsTheProcesss: the figure is the process's resident
// memory (within 25% of VmRSS read just after, which moves a little
// between the readings), not the Go heap.
func TestResidentMemoryIsTheProcesss(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("resident memory is read from /proc on Linux only")
	}
	got := ResidentMemory()
	want := vmRSS(t)
	if got < want*3/4 || got > want*5/4 {
		t.Fatalf("ResidentMemory %d, VmRSS %d", got, want)
	}
}
