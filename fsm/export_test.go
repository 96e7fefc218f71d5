package fsm

import "fmt"

// SnapshotAs encodes m's state in snapshot format version (2, 3 or 4) at
// protocol level level (written only by format 4), as the binary that
// wrote that format would have: format 3 adds the delivery-tag floor to
// format 2, format 4 the level. Formats 2 and 3 carry what a binary
// before levels wrote only for a state that is at level 1.
func SnapshotAs(m *Machine, version uint64, level uint32) ([]byte, error) {
	b := m.encode()
	d := &dec{b: b[len(snapMagic):]}
	if v := d.u(); v != snapVersion {
		return nil, fmt.Errorf("current format is %d, not %d", v, snapVersion)
	}
	index, clock, initialized, floor := d.u(), d.i(), d.bo(), d.u()
	d.u() // the level
	if d.err != nil {
		return nil, d.err
	}
	e := &enc{}
	e.b = append(e.b, snapMagic...)
	e.u(version)
	e.u(index)
	e.i(clock)
	e.bo(initialized)
	switch version {
	case 2:
	case 3:
		e.u(floor)
	case 4:
		e.u(floor)
		e.u(uint64(level))
	default:
		return nil, fmt.Errorf("no format %d", version)
	}
	return append(e.b, d.b...), nil
}
