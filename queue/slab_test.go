package queue

import (
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/raftmq/raftmq/internal/anonmem"
	"github.com/raftmq/raftmq/ttl"
)

// The package's tests run with freed blocks poisoned: a block read or
// written after it was freed faults, and the test binary dies.
func TestMain(m *testing.M) {
	poisonFreed.Store(true)
	os.Exit(m.Run())
}

// unpoisoned runs fn with tables made in it freeing blocks for reuse and
// unmapping empty slabs, as outside tests.
func unpoisoned(t *testing.T, fn func()) {
	poisonFreed.Store(false)
	defer poisonFreed.Store(true)
	fn()
}

// A record holds no pointer: slabs are memory the collector does not scan.
func TestRec_NoPointer(t *testing.T) {
	ty := reflect.TypeFor[rec]()
	for i := range ty.NumField() {
		switch ty.Field(i).Type.Kind() {
		case reflect.Uint8, reflect.Uint32, reflect.Uint64, reflect.Int64:
		default:
			t.Fatalf("rec.%s is a %s", ty.Field(i).Name, ty.Field(i).Type)
		}
	}
	if blockBytes%os.Getpagesize() != 0 {
		t.Fatalf("a block is %d bytes, not whole pages", blockBytes)
	}
}

func skipNoSlabs(t *testing.T) {
	mem, err := anonmem.Map(blockBytes)
	if err != nil {
		t.Skip("no slabs here:", err)
	}
	anonmem.Unmap(mem)
}

func fillQueue(q *Queue, n int, prios uint8) {
	for i := range n {
		m := &Message{Exchange: "x", RoutingKey: "k", Body: Body{Index: uint64(i + 1), Size: 10}, Seq: q.NextSeq(),
			Deadline: ttl.NoDeadline, MsgTTL: -1, Priority: uint8(i) % (prios + 1)}
		if i%7 == 0 {
			m.Deadline = int64(i)
		}
		q.PushBack(m)
	}
}

// A queue's full blocks are in slabs, which it unmaps as it drains, by
// pops, removals and expiries alike, and when it is purged (deleted).
func TestSlab_DrainUnmaps(t *testing.T) {
	skipNoSlabs(t)
	unpoisoned(t, func() {
		for _, how := range []string{"pop", "remove", "expire", "purge"} {
			tab := &Table{}
			var q Queue
			q.SetTable(tab)
			q.SetMaxPriority(2)
			const n = 200_000
			fillQueue(&q, n, 2)
			mapped, blocks := tab.Slabs()
			if blocks < n/blockSize || mapped < blocks/slabBlocks {
				t.Fatalf("%s: %d messages in %d slab blocks, %d slabs", how, n, blocks, mapped)
			}
			switch how {
			case "pop":
				for q.PopFront() != nil {
				}
			case "remove":
				for i := n; i > 0; i-- {
					if q.Remove(&Message{Seq: uint64(i), Priority: uint8(i-1) % 3}) == nil {
						t.Fatalf("message %d not removed", i)
					}
				}
			case "expire":
				q.UpdateDeadlines(func(*Message) int64 { return 1 })
				q.PopExpired(1)
			case "purge":
				q.Purge()
			}
			if q.Len() != 0 {
				t.Fatalf("%s: %d left", how, q.Len())
			}
			if mapped, blocks := tab.Slabs(); mapped != 0 || blocks != 0 {
				t.Fatalf("%s: drained, %d slabs mapped, %d blocks in use", how, mapped, blocks)
			}
		}
	})
}

// A block a live capture reads is freed when the capture is released,
// not before: the capture reads every message of the drained queue.
func TestSlab_CaptureKeepsBlocks(t *testing.T) {
	skipNoSlabs(t)
	unpoisoned(t, func() {
		tab := &Table{}
		var q Queue
		q.SetTable(tab)
		const n = 20 * blockSize
		fillQueue(&q, n, 0)
		cp := tab.Capture()
		v := q.Capture(cp)
		for q.PopFront() != nil {
		}
		fillQueue(&q, n, 0) // reuses no block the capture reads
		if _, blocks := tab.Slabs(); blocks < 2*n/blockSize {
			t.Fatalf("%d blocks in use with %d messages and a capture of %d", blocks, n, n)
		}
		i := 0
		v.Each(func(m *Message) {
			if i++; m.Body.Index != uint64(i) {
				t.Fatalf("the capture's message %d has body %d", i, m.Body.Index)
			}
		})
		if i != n {
			t.Fatalf("the capture read %d of %d", i, n)
		}
		cp.Release()
		q.Purge()
		if mapped, blocks := tab.Slabs(); mapped != 0 || blocks != 0 {
			t.Fatalf("released and purged: %d slabs mapped, %d blocks in use", mapped, blocks)
		}
	})
}

// Reading a freed block faults while freed blocks are poisoned, as the
// tests run: a use after free kills the test binary rather than read
// another queue's records.
func TestSlab_UseAfterFreeFaults(t *testing.T) {
	if os.Getenv("QUEUE_USE_AFTER_FREE") == "1" {
		tab := &Table{}
		var q Queue
		q.SetTable(tab)
		fillQueue(&q, 3*blockSize, 0)
		stale := q.lanes[0].blocks[0]
		for range blockSize {
			q.PopFront()
		}
		println("read", stale.r[5].seq) // freed: faults
		os.Exit(0)
	}
	skipNoSlabs(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestSlab_UseAfterFreeFaults$")
	cmd.Env = append(os.Environ(), "QUEUE_USE_AFTER_FREE=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "unexpected fault address") {
		t.Fatalf("reading a freed block did not fault: %v\n%s", err, out)
	}
}
