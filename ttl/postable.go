package ttl

// posTable maps an id to its heap slot.
type posTable struct {
	m map[uint64]int32
}

func (t *posTable) get(id uint64) (int, bool) {
	i, ok := t.m[id]
	return int(i), ok
}

func (t *posTable) set(id uint64, i int) {
	if t.m == nil {
		t.m = make(map[uint64]int32)
	}
	t.m[id] = int32(i)
}

func (t *posTable) del(id uint64) { delete(t.m, id) }
