package queue

// blockBits sets the records of one block: 1,024 records, 40 KiB. A lane
// grows by whole blocks, so a backlog is never copied to grow and costs
// at most one partly used block beyond its records; a small lane's only
// block grows by doubling up to that size.
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
	blocks [][]rec
	head   int
	n      int // positions in use, holes included
	holes  int // dead records among them (never at position 0)
	// mixed: positions below it may be in any sequence order; from it on
	// sequence numbers ascend (requeued messages go to the head, new
	// ones to the tail), which find searches by bisection.
	mixed int
}

func (l *lane) at(i int) *rec {
	a := l.head + i
	return &l.blocks[a>>blockBits][a&blockMask]
}

func (l *lane) pushBack(r rec) {
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
		l.blocks = append(l.blocks, make([]rec, 0, size))
	}
	blk := l.blocks[b]
	if len(blk) == cap(blk) {
		// Only a lane's single block is below blockSize; double it.
		nb := make([]rec, len(blk), min(2*cap(blk), blockSize))
		copy(nb, blk)
		blk = nb
	}
	l.blocks[b] = append(blk, r)
	l.n++
}

// pushFront puts rs before the head, in their order.
func (l *lane) pushFront(rs []rec) {
	k := len(rs)
	if l.head < k {
		if len(l.blocks) <= 1 && l.n+k <= blockSize {
			// One small block: rebuild it with room.
			var live []rec
			if len(l.blocks) == 1 {
				live = l.blocks[0][l.head : l.head+l.n]
			}
			nb := make([]rec, 0, max(4, l.n+k))
			nb = append(nb, rs...)
			nb = append(nb, live...)
			l.blocks = append(l.blocks[:0], nb)
			l.head, l.n, l.mixed = 0, len(nb), l.mixed+k
			return
		}
		if len(l.blocks) == 1 && len(l.blocks[0]) < blockSize {
			// Make the single block a full one, records at its end.
			nb := make([]rec, blockSize)
			copy(nb[blockSize-l.n:], l.blocks[0][l.head:l.head+l.n])
			l.blocks[0], l.head = nb, blockSize-l.n
		}
		for l.head < k {
			l.blocks = append(l.blocks, nil)
			copy(l.blocks[1:], l.blocks)
			l.blocks[0] = make([]rec, blockSize)
			l.head += blockSize
		}
	}
	l.head -= k
	l.n += k
	l.mixed += k
	for i, r := range rs {
		*l.at(i) = r
	}
}

// popFront drops the head record, and any dead ones behind it.
func (l *lane) popFront() {
	for {
		l.head++
		l.n--
		if l.mixed > 0 {
			l.mixed--
		}
		if l.n == 0 {
			l.reset()
			return
		}
		if l.head == blockSize {
			copy(l.blocks, l.blocks[1:])
			l.blocks[len(l.blocks)-1] = nil
			l.blocks = l.blocks[:len(l.blocks)-1]
			l.head = 0
		}
		if l.at(0).flags&fDead == 0 {
			return
		}
		l.holes--
	}
}

// reset empties the lane, keeping its first block for reuse.
func (l *lane) reset() {
	if len(l.blocks) > 0 {
		b := l.blocks[0][:0]
		clear(l.blocks[1:])
		l.blocks = append(l.blocks[:0], b)
	}
	l.head, l.n, l.holes, l.mixed = 0, 0, 0, 0
}

// kill marks the record at position i dead (its message was taken).
func (l *lane) kill(i int) {
	if i == 0 {
		l.popFront()
		return
	}
	l.at(i).flags |= fDead
	l.holes++
	if l.holes > 64 && 2*l.holes > l.n {
		l.compact()
	}
}

// compact drops the dead records, keeping the order of the others.
func (l *lane) compact() {
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
			*l.at(w) = *r
		}
		w++
	}
	l.n, l.holes, l.mixed = w, 0, mixed
	if w == 0 {
		l.reset()
		return
	}
	end := l.head + w
	nb := (end + blockMask) >> blockBits
	clear(l.blocks[nb:])
	l.blocks = l.blocks[:nb]
	last := end - (nb-1)<<blockBits
	l.blocks[nb-1] = l.blocks[nb-1][:last]
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
