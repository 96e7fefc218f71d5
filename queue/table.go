package queue

import (
	"encoding/binary"
	"unsafe"
)

// Table holds, once, what the copies of one publish and the messages of
// a queue share: exchange, routing key, encoded properties, BCC keys,
// per-message TTL, priority and delivery mode. A queued message's record
// names its entry with a uint32 handle; entries are counted and freed
// with their last record. Entries are keyed by content, so messages
// published alike (most of a queue's) share one whatever publish they
// came from. A Table is not state: handles are never written anywhere,
// so two replicas may number them differently. One Table serves every
// queue of a state machine; it is not safe for concurrent use.
type Table struct {
	entries []meta
	free    []uint32
	byKey   map[string]uint32
	scratch []byte
	last    uint32 // handle + 1 of the entry last interned, 0 for none
	cow     *cow   // captures (cow.go); kept across a reset
}

// meta is one entry: the content's encoding (keyOf), which fill reads
// back, and its count of references. 24 bytes, so that an entry per
// message (properties unique to each, such as a message-id) costs little
// more than the message's own copy of them did.
type meta struct {
	key  string
	refs uint32
}

// Entries is the number of live entries (tests and benchmarks).
func (t *Table) Entries() int { return len(t.byKey) }

func (t *Table) keyOf(m *Message) []byte {
	b := t.scratch[:0]
	b = binary.AppendUvarint(b, uint64(len(m.Exchange)))
	b = append(b, m.Exchange...)
	b = binary.AppendUvarint(b, uint64(len(m.RoutingKey)))
	b = append(b, m.RoutingKey...)
	b = binary.AppendUvarint(b, uint64(len(m.Props)))
	b = append(b, m.Props...)
	b = binary.AppendVarint(b, m.MsgTTL)
	b = append(b, m.Priority)
	if m.Persistent {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	bcc := m.BCC()
	b = binary.AppendUvarint(b, uint64(len(bcc)))
	for _, k := range bcc {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
	}
	t.scratch = b
	return b
}

// intern returns the handle of m's shared part, counting one more
// reference to it. The entry copies what it keeps: m may alias a buffer.
func (t *Table) intern(m *Message) uint32 {
	if t.cow != nil && len(t.cow.pending)+len(t.cow.dropped) > 0 {
		t.settle()
	}
	k := t.keyOf(m)
	if t.last != 0 {
		if e := &t.entries[t.last-1]; e.key == string(k) {
			e.refs++
			return t.last - 1
		}
	}
	if h, ok := t.byKey[string(k)]; ok {
		t.entries[h].refs++
		t.last = h + 1
		return h
	}
	key := string(k)
	e := meta{key: key, refs: 1}
	var h uint32
	if n := len(t.free); n > 0 {
		h = t.free[n-1]
		t.free = t.free[:n-1]
		t.entries[h] = e
	} else {
		h = uint32(len(t.entries))
		t.entries = append(t.entries, e)
	}
	if t.byKey == nil {
		t.byKey = map[string]uint32{}
	}
	t.byKey[key] = h
	t.last = h + 1
	return h
}

// field reads a length-prefixed string of key at p.
func field(key string, p int) (string, int) {
	n, w := uvarint(key, p)
	p += w
	return key[p : p+int(n)], p + int(n)
}

func uvarint(key string, p int) (uint64, int) {
	return binary.Uvarint(unsafe.Slice(unsafe.StringData(key[p:]), len(key)-p))
}

// release drops one reference to h, freeing the entry with its last.
func (t *Table) release(h uint32) {
	c := t.cow
	if c != nil && len(c.pending)+len(c.dropped) > 0 {
		t.settle() // first: h, still counted, stays
	}
	e := &t.entries[h]
	if e.refs--; e.refs > 0 {
		return
	}
	if c != nil && c.live.Load() > 0 {
		// A capture may name it: keep it (and its key, which a publish
		// alike may count again) until none lives.
		c.pending = append(c.pending, h)
		return
	}
	t.free1(h)
}

// free1 frees entry h, which no record names.
func (t *Table) free1(h uint32) {
	e := &t.entries[h]
	delete(t.byKey, e.key)
	*e = meta{}
	if t.last == h+1 {
		t.last = 0
	}
	if len(t.byKey) == 0 {
		if cap(t.entries) > keptTableCap {
			// Nothing left of a large table: give the memory back.
			*t = Table{scratch: t.scratch, cow: t.cow}
			return
		}
		// Nothing left of a small one: keep its map and slices. A queue
		// consumed as fast as it is published is empty between two
		// messages, and making them again took three allocations a
		// message. Every entry is zero already (freed ones are), and no
		// capture lives (free1 runs only then), so none reads the array
		// the next entries are written into.
		t.entries, t.free, t.last = t.entries[:0], t.free[:0], 0
		return
	}
	t.free = append(t.free, h)
}

// keptTableCap is the most entries a table that empties keeps room for;
// a larger one gives its memory back (a map never shrinks).
const keptTableCap = 256

// fill sets m's shared fields from entry h: its strings share the
// entry's key, Props too (never changed in place).
func (t *Table) fill(m *Message, h uint32) { fillFrom(t.entries, m, h) }

// fillFrom is fill from a table's entries (a capture's view of them).
func fillFrom(entries []meta, m *Message, h uint32) {
	key := entries[h].key
	var p int
	m.Exchange, p = field(key, 0)
	m.RoutingKey, p = field(key, p)
	var props string
	if props, p = field(key, p); len(props) > 0 {
		m.Props = unsafe.Slice(unsafe.StringData(props), len(props))
	} else {
		m.Props = nil
	}
	ttl, w := binary.Varint(unsafe.Slice(unsafe.StringData(key[p:]), len(key)-p))
	p += w
	m.MsgTTL, m.Priority, m.Persistent = ttl, key[p], key[p+1] == 1
	p += 2
	n, w := uvarint(key, p)
	p += w
	if n > 0 {
		bcc := make([]string, n)
		for i := range bcc {
			bcc[i], p = field(key, p)
		}
		m.rare().bcc = bcc
	}
}
