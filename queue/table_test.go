package queue

import (
	"strconv"
	"testing"
)

// A table that empties keeps its map and slices while small: a queue
// consumed as fast as it is published empties between two messages, and
// each message would make them again. Interning a message unlike any
// other and releasing it costs the key's copy alone.
func TestTable_ASmallTableThatEmptiesKeepsItsRoom(t *testing.T) {
	var tab Table
	m := &Message{Exchange: "x", RoutingKey: "q", MsgTTL: -1}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		i++
		m.Props = []byte(strconv.Itoa(i)) // unique, as a message-id makes them
		tab.release(tab.intern(m))
	})
	// One allocation is the key; Props above is the other.
	if allocs > 2 {
		t.Fatalf("%.1f allocations to intern and release a message, want the key's alone", allocs)
	}
	if tab.Entries() != 0 || len(tab.entries) != 0 || tab.byKey == nil {
		t.Fatalf("emptied: %d entries, %d slots, map kept %v", tab.Entries(), len(tab.entries), tab.byKey != nil)
	}
}

// A large table that empties gives its memory back (a map never shrinks),
// and entries interned after that are numbered from the start again.
func TestTable_ALargeTableThatEmptiesGivesItsMemoryBack(t *testing.T) {
	var tab Table
	var hs []uint32
	for i := range keptTableCap + 1 {
		hs = append(hs, tab.intern(&Message{RoutingKey: strconv.Itoa(i), MsgTTL: -1}))
	}
	for _, h := range hs {
		tab.release(h)
	}
	if tab.byKey != nil || tab.entries != nil || tab.free != nil {
		t.Fatalf("emptied after %d entries: map %v, %d slots of room, %d free kept", len(hs), tab.byKey != nil, cap(tab.entries), cap(tab.free))
	}
	m := &Message{RoutingKey: "again", MsgTTL: -1}
	h := tab.intern(m)
	var got Message
	tab.fill(&got, h)
	if h != 0 || got.RoutingKey != "again" {
		t.Fatalf("after the reset: handle %d, routing key %q", h, got.RoutingKey)
	}
}
