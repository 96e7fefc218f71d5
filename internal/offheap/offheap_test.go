package offheap

import (
	"runtime"
	"testing"

	"github.com/prometheus/procfs"
)

// rssAnon is the process's resident anonymous memory in bytes, or false
// without /proc.
func rssAnon(t *testing.T) (int64, bool) {
	t.Helper()
	p, err := procfs.Self()
	if err != nil {
		return 0, false
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, false
	}
	return int64(st.RssAnon), true
}

// A large buffer is outside the heap: filling it grows neither the heap
// nor the collector's goal, and Free gives its pages back at once.
func TestAlloc_LargeBufferLeavesTheHeapAndFreeReturnsIt(t *testing.T) {
	const n = 64 << 20
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rss0, ok := rssAnon(t)
	b := Alloc(n)
	if !b.Mapped() {
		if runtime.GOOS == "linux" {
			t.Fatal("a 64 MiB buffer was not mapped")
		}
		t.Skip("no mapping on " + runtime.GOOS)
	}
	buf := b.Bytes()
	if len(buf) != 0 || cap(buf) != n {
		t.Fatalf("len %d cap %d", len(buf), cap(buf))
	}
	buf = buf[:n]
	for i := 0; i < n; i += 4096 {
		buf[i] = 1
	}
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > n/4 {
		t.Fatalf("the heap grew by %d bytes", grew)
	}
	if !ok {
		b.Free()
		return
	}
	rss1, _ := rssAnon(t)
	if rss1-rss0 < n*3/4 {
		t.Fatalf("filling 64 MiB grew RssAnon by %d bytes only", rss1-rss0)
	}
	b.Free()
	b.Free()
	rss2, _ := rssAnon(t)
	if rss1-rss2 < n*3/4 {
		t.Fatalf("Free gave back %d of 64 MiB", rss1-rss2)
	}
}

func TestAlloc_SmallBufferIsTheHeaps(t *testing.T) {
	b := Alloc(MinSize - 1)
	if b.Mapped() || cap(b.Bytes()) != MinSize-1 {
		t.Fatalf("mapped %v cap %d", b.Mapped(), cap(b.Bytes()))
	}
	b.Free()
	if b.Bytes() != nil {
		t.Fatal("a freed buffer still has bytes")
	}
}
