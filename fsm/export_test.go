package fsm

import (
	"fmt"

	"github.com/raftmq/raftmq/queue"
)

// BodyOf gives SnapshotAs the bytes of named bodies, which formats before
// 7 held (set by the external tests to fsmtest.Body).
var BodyOf func(queue.Body) []byte

// SnapshotAs encodes m's state in snapshot format version (2 to
// snapVersion), as the binary that wrote that format would have: format 3
// adds the delivery-tag floor to format 2, format 4 the protocol level, 5
// each message's returns. Formats 2 and 3 carry what a binary before
// levels wrote only for a state that is at level 1; level replaces the
// state's level in formats 4 and later.
func SnapshotAs(m *Machine, version uint64, level uint32) ([]byte, error) {
	if version < 2 || version > snapVersion {
		return nil, fmt.Errorf("no format %d", version)
	}
	kept := m.level
	defer func() { m.level = kept }()
	m.level = level
	e := &enc{format: version, bodyOf: BodyOf}
	m.encodeTo(e)
	return e.b, nil
}

// TableEntries is the number of live entries of the table of shared
// message fields.
func (m *Machine) TableEntries() int { return m.meta.Entries() }

// CopiedOnWrite is what the state copied because a snapshot shared it
// (queue.Table.Copied).
func (m *Machine) CopiedOnWrite() (blocks int, bytes int64) { return m.meta.Copied() }
