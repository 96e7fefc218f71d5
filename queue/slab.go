package queue

import (
	"os"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/raftmq/raftmq/internal/anonmem"
)

// Full record blocks live outside the collected heap, in slabs of
// anonymous memory the queue maps and frees itself. The garbage collector
// sets its next target at twice the live heap, so 40 bytes of records a
// queued message on the heap cost about 80 resident; out of it they cost
// their 40, and nothing of a backlog is counted toward the next collection.
// The records hold no pointer (rec), so memory the collector does not
// know of may hold them; a lane's list of blocks, and a capture's copy of
// it, stay on the heap and point into a slab, which the collector ignores.
//
// A lane's small first block (below blockSize records) stays on the heap:
// the many short queues of a broker cost no slab. A block leaves the lane
// through cow.drop, which frees it at once unless a live capture may read
// it (it waits in cow.dropped until none lives, as table entries wait in
// cow.pending). A slab whose blocks are all free is unmapped; a free block
// of a slab still in use is given back to the kernel (madvise), so a
// draining queue returns its memory as it drains. What a table's queues
// never gave back (a state dropped whole on restore) is unmapped when the
// table is collected.
const (
	blockBytes = blockSize * int(unsafe.Sizeof(rec{})) // 40 KiB, ten pages
	slabBlocks = 64                                    // 2.5 MiB a slab
)

// offHeap counts the slab memory of every table: mapped, and in blocks
// handed out (benchmarks, metrics).
var offHeap struct {
	mapped, used atomic.Int64
}

// OffHeap is the memory the queues of the process hold outside the
// collected heap: the bytes mapped for record slabs and the bytes of
// blocks in use in them.
func OffHeap() (mapped, used int64) { return offHeap.mapped.Load(), offHeap.used.Load() }

// poisonFreed makes freed blocks inaccessible and never reused, so that a
// read or write of a freed block faults (tests; RAFTMQ_QUEUE_POISON=1).
var poisonFreed atomic.Bool

func init() {
	if os.Getenv("RAFTMQ_QUEUE_POISON") == "1" {
		poisonFreed.Store(true)
	}
}

// slab is one mapping of slabBlocks blocks.
type slab struct {
	mem  []byte
	free []uint8 // indices of free blocks, the next to hand out last
	used int
	dead int // blocks poisoned, never handed out again
}

// slabs is a table's allocator of full blocks; it is used on the
// goroutine that owns the state only.
type slabs struct {
	all    []*slab // mapped, oldest first
	poison bool
}

func newSlabs() *slabs { return &slabs{poison: poisonFreed.Load()} }

// get returns a free full block, nil when no memory could be mapped (the
// caller falls back to the heap). It takes from the oldest slab with a
// free block, so that the newer ones empty first and are unmapped.
func (a *slabs) get() (*slab, []rec) {
	var s *slab
	for _, x := range a.all {
		if len(x.free) > 0 {
			s = x
			break
		}
	}
	if s == nil {
		mem, err := anonmem.Map(slabBlocks * blockBytes)
		if err != nil {
			return nil, nil
		}
		s = &slab{mem: mem, free: make([]uint8, slabBlocks)}
		for i := range s.free {
			s.free[i] = uint8(slabBlocks - 1 - i)
		}
		a.all = append(a.all, s)
		offHeap.mapped.Add(int64(len(mem)))
	}
	i := int(s.free[len(s.free)-1])
	s.free = s.free[:len(s.free)-1]
	s.used++
	offHeap.used.Add(int64(blockBytes))
	return s, unsafe.Slice((*rec)(unsafe.Pointer(&s.mem[i*blockBytes])), blockSize)
}

// put frees block r of slab s, which nothing reads any more.
func (a *slabs) put(s *slab, r []rec) {
	off := uintptr(unsafe.Pointer(unsafe.SliceData(r))) - uintptr(unsafe.Pointer(&s.mem[0]))
	if off%uintptr(blockBytes) != 0 || off >= uintptr(len(s.mem)) {
		panic("queue: a block freed to a slab it is not of")
	}
	i := int(off) / blockBytes
	mem := s.mem[i*blockBytes : (i+1)*blockBytes]
	s.used--
	offHeap.used.Add(-int64(blockBytes))
	if a.poison {
		anonmem.Poison(mem)
		s.dead++
		return
	}
	if s.used == 0 {
		a.unmap(s)
		return
	}
	anonmem.Release(mem)
	s.free = append(s.free, uint8(i))
}

func (a *slabs) unmap(s *slab) {
	for j, x := range a.all {
		if x == s {
			a.all = append(a.all[:j], a.all[j+1:]...)
			break
		}
	}
	offHeap.mapped.Add(-int64(len(s.mem)))
	offHeap.used.Add(-int64(s.used * blockBytes))
	anonmem.Unmap(s.mem)
	s.mem, s.free, s.used = nil, nil, 0
}

// unmapAll frees every slab: the table they served is gone.
func (a *slabs) unmapAll() {
	for len(a.all) > 0 {
		a.unmap(a.all[0])
	}
}

// stats is the slabs mapped and the blocks in use in them (tests).
func (a *slabs) stats() (mapped, used int) {
	for _, s := range a.all {
		used += s.used
	}
	return len(a.all), used
}

// Slabs is the number of record slabs the table's queues have mapped and
// of the blocks in use in them (tests and benchmarks).
func (t *Table) Slabs() (mapped, blocks int) {
	if t.cow == nil {
		return 0, 0
	}
	return t.cow.slabs.stats()
}

// newBlk makes a block for n records of size capacity, stamped with the
// epoch: a full one in a slab, a smaller one (or any when no slab could
// be mapped) on the heap.
func newBlk(c *cow, n, size int) blk {
	if size == blockSize && c != nil {
		c.settleBlocks()
		if s, r := c.slabs.get(); s != nil {
			return blk{r: r[:n], epoch: c.epoch, s: s}
		}
	}
	return blk{r: make([]rec, n, size), epoch: c.stamp()}
}

// drop gives back the storage of a block its lane no longer holds: at
// once, or when no capture that may read it lives.
func (c *cow) drop(b blk) {
	if b.s == nil {
		return
	}
	if c.shared(b.epoch) {
		c.dropped = append(c.dropped, b)
		return
	}
	c.slabs.put(b.s, b.r)
	c.settleBlocks()
}

// settleBlocks frees the blocks dropped while a capture lived, once none
// does.
func (c *cow) settleBlocks() {
	if len(c.dropped) == 0 || c.live.Load() > 0 {
		return
	}
	for _, b := range c.dropped {
		c.slabs.put(b.s, b.r)
	}
	clear(c.dropped)
	c.dropped = c.dropped[:0]
}

// freeOnCollect unmaps the table's slabs when the table is collected: a
// state dropped whole (replaced by a restore) does not give its queues'
// blocks back one by one. Nothing reads them then: every queue and every
// capture refers to the table.
func freeOnCollect(t *Table, a *slabs) {
	runtime.AddCleanup(t, func(a *slabs) { a.unmapAll() }, a)
}
