// Package offheap hands out large byte buffers outside the Go heap, for
// the few buffers whose size follows the state (a snapshot's encoding):
// on the heap such a buffer raises the collector's goal by its size while
// it lives, and once freed its pages stay resident until the runtime's
// scavenger returns them, slowly. A buffer from Alloc is mapped from the
// operating system and goes back to it at Free, at once.
//
// A buffer must not be used after Free, and nothing the collector manages
// may be stored in it (it is never scanned): it is for plain bytes.
package offheap

// MinSize is the smallest buffer worth mapping; smaller ones come from
// the heap, where Free leaves them to the collector.
const MinSize = 4 << 20

// Buffer is a byte buffer from Alloc.
type Buffer struct {
	b      []byte
	mapped bool
}

// Alloc returns a buffer of capacity n and length 0: mapped when n is at
// least MinSize and the system can map it, else from the heap.
func Alloc(n int) *Buffer {
	if n >= MinSize {
		if b, ok := mapBytes(n); ok {
			return &Buffer{b: b[:0], mapped: true}
		}
	}
	return &Buffer{b: make([]byte, 0, n)}
}

// Bytes is the buffer, length 0 and the capacity asked for. An append
// beyond that capacity moves to the heap as any append does; Free still
// returns the mapped pages.
func (b *Buffer) Bytes() []byte { return b.b }

// Mapped reports whether the buffer is outside the heap.
func (b *Buffer) Mapped() bool { return b.mapped }

// Free gives the buffer back; a second Free does nothing.
func (b *Buffer) Free() {
	if b == nil || b.b == nil {
		return
	}
	if b.mapped {
		unmapBytes(b.b[:cap(b.b)])
	}
	b.b = nil
}
