package queue

import "unsafe"

// blockBits sets the records of one block: 1,024 records, 40 KiB. A lane
// grows by whole blocks, so a backlog is never copied to grow and costs
// at most one partly used block beyond its records; a small lane's only
// block grows by doubling up to that size. Full blocks are in slabs off
// the collected heap (slab.go), smaller ones on it.
const (
	blockBits = 10
	blockSize = 1 << blockBits
	blockMask = blockSize - 1
)

// lane is the FIFO of one priority: a deque of records in blocks.
// Position i (0 = head) is at absolute a = head+i: blocks[a>>blockBits]
// [a&blockMask]. Every block but the last holds blockSize records (the
// first from head on); with one block it may be smaller, len = head+n.
type lane struct {
	blocks []blk
	head   int
	n      int // positions in use, holes included
	holes  int // dead records among them (never at position 0)
	// mixed: positions below it may be in any sequence order; from it on
	// sequence numbers ascend (requeued messages go to the head, new
	// ones to the tail), which find searches by bisection.
	mixed int
}

// blk is a block of records and the epoch it was made in: while a
// capture made after lives, the block is shared with it (cow.go). A block
// the lane lets go of goes to cow.drop, which frees a slab's.
type blk struct {
	r     []rec
	epoch uint64
	s     *slab // the slab r is in; nil for a block on the heap
}

func (l *lane) at(i int) *rec {
	a := l.head + i
	return &l.blocks[a>>blockBits].r[a&blockMask]
}

// mut is at for a write: a block a live capture shares is cloned first.
func (l *lane) mut(c *cow, i int) *rec {
	a := l.head + i
	l.own(c, a>>blockBits)
	return &l.blocks[a>>blockBits].r[a&blockMask]
}

// own clones block b when a live capture shares it.
func (l *lane) own(c *cow, b int) {
	if bl := &l.blocks[b]; c.shared(bl.epoch) {
		old := *bl
		nb := newBlk(c, len(bl.r), cap(bl.r))
		copy(nb.r, old.r)
		*bl = nb
		c.drop(old)
		c.count(int64(cap(nb.r))*int64(unsafe.Sizeof(rec{})), true)
	}
}

func (l *lane) pushBack(c *cow, r rec) {
	if l.n > l.mixed && r.seq <= l.at(l.n-1).seq {
		l.mixed = l.n // out of order (a restored requeue): search it linearly
	}
	a := l.head + l.n
	b := a >> blockBits
	if b == len(l.blocks) {
		size := blockSize
		if b == 0 {
			size = 4
		}
		l.blocks = append(l.blocks, newBlk(c, 0, size))
	}
	bl := &l.blocks[b]
	if len(bl.r) == cap(bl.r) {
		// Only a lane's single block is below blockSize; double it.
		old := *bl
		nb := newBlk(c, len(bl.r), min(2*cap(bl.r), blockSize))
		copy(nb.r, old.r)
		*bl = nb
		c.drop(old)
	}
	// Past the block's length: no capture reads there, even of a
	// shared block (a shared block is never shortened).
	bl.r = append(bl.r, r)
	l.n++
}

// pushFront puts rs before the head, in their order.
func (l *lane) pushFront(c *cow, rs []rec) {
	k := len(rs)
	if l.head < k {
		if len(l.blocks) <= 1 && l.n+k <= blockSize {
			// One small block: rebuild it with room.
			var live []rec
			if len(l.blocks) == 1 {
				live = l.blocks[0].r[l.head : l.head+l.n]
			}
			nb := newBlk(c, 0, max(4, l.n+k))
			nb.r = append(nb.r, rs...)
			nb.r = append(nb.r, live...)
			if len(l.blocks) == 1 {
				c.drop(l.blocks[0])
			}
			l.blocks = append(l.blocks[:0], nb)
			l.head, l.n, l.mixed = 0, len(nb.r), l.mixed+k
			return
		}
		if len(l.blocks) == 1 && len(l.blocks[0].r) < blockSize {
			// Make the single block a full one, records at its end.
			nb := newBlk(c, blockSize, blockSize)
			copy(nb.r[blockSize-l.n:], l.blocks[0].r[l.head:l.head+l.n])
			c.drop(l.blocks[0])
			l.blocks[0], l.head = nb, blockSize-l.n
		}
		for l.head < k {
			l.blocks = append(l.blocks, blk{})
			copy(l.blocks[1:], l.blocks)
			l.blocks[0] = newBlk(c, blockSize, blockSize)
			l.head += blockSize
		}
	}
	l.head -= k
	l.n += k
	l.mixed += k
	for i, r := range rs {
		*l.mut(c, i) = r
	}
}

// popFront drops the head record, and any dead ones behind it.
func (l *lane) popFront(c *cow) {
	for {
		l.head++
		l.n--
		if l.mixed > 0 {
			l.mixed--
		}
		if l.n == 0 {
			l.reset(c)
			return
		}
		if l.head == blockSize {
			c.drop(l.blocks[0])
			copy(l.blocks, l.blocks[1:])
			l.blocks[len(l.blocks)-1] = blk{}
			l.blocks = l.blocks[:len(l.blocks)-1]
			l.head = 0
		}
		if l.at(0).flags&fDead == 0 {
			return
		}
		l.holes--
	}
}

// reset empties the lane, keeping its first block for reuse when it is
// a small one on the heap that no capture shares (it would be written
// over from its start); a drained lane holds no slab block.
func (l *lane) reset(c *cow) {
	keep := len(l.blocks) > 0 && l.blocks[0].s == nil && !c.shared(l.blocks[0].epoch)
	for i, b := range l.blocks {
		if i > 0 || !keep {
			c.drop(b)
		}
	}
	if keep {
		clear(l.blocks[1:])
		l.blocks[0].r = l.blocks[0].r[:0]
		l.blocks = l.blocks[:1]
	} else {
		clear(l.blocks)
		l.blocks = l.blocks[:0]
	}
	l.head, l.n, l.holes, l.mixed = 0, 0, 0, 0
}

// free drops every block of the lane and empties it.
func (l *lane) free(c *cow) {
	for _, b := range l.blocks {
		c.drop(b)
	}
	*l = lane{}
}

// kill marks the record at position i dead (its message was taken).
func (l *lane) kill(c *cow, i int) {
	if i == 0 {
		l.popFront(c)
		return
	}
	l.mut(c, i).flags |= fDead
	l.holes++
	if l.holes > 64 && 2*l.holes > l.n {
		l.compact(c)
	}
}

// compact drops the dead records, keeping the order of the others.
func (l *lane) compact(c *cow) {
	w, mixed := 0, 0
	for i := 0; i < l.n; i++ {
		r := l.at(i)
		if r.flags&fDead != 0 {
			continue
		}
		if i < l.mixed {
			mixed++
		}
		if w != i {
			*l.mut(c, w) = *r
		}
		w++
	}
	l.n, l.holes, l.mixed = w, 0, mixed
	if w == 0 {
		l.reset(c)
		return
	}
	end := l.head + w
	nb := (end + blockMask) >> blockBits
	for _, b := range l.blocks[nb:] {
		c.drop(b)
	}
	clear(l.blocks[nb:])
	l.blocks = l.blocks[:nb]
	last := end - (nb-1)<<blockBits
	if len(l.blocks[nb-1].r) > last {
		l.own(c, nb-1) // shortened, appends would write where a capture reads
		l.blocks[nb-1].r = l.blocks[nb-1].r[:last]
	}
}

// find returns the position of the live record with sequence number seq,
// -1 when there is none.
func (l *lane) find(seq uint64) int {
	lo, hi := l.mixed, l.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if l.at(m).seq < seq {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < l.n {
		if r := l.at(lo); r.seq == seq && r.flags&fDead == 0 {
			return lo
		}
	}
	for i := 0; i < l.mixed; i++ {
		if r := l.at(i); r.seq == seq && r.flags&fDead == 0 {
			return i
		}
	}
	return -1
}
