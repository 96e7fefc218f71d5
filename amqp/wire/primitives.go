package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// errShort is the decoding error for input that ends too early.
var errShort = errors.New("truncated input")

// decoder reads AMQP primitives from a bounded slice. The first failure
// sticks: later reads return zero values, and err says what went wrong.
type decoder struct {
	b     []byte
	off   int
	err   error
	depth int
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
}

// take returns the next n bytes, or nil after recording a failure.
func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b)-d.off {
		d.err = errShort
		return nil
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p
}

func (d *decoder) remaining() int { return len(d.b) - d.off }

func (d *decoder) octet() uint8 {
	if p := d.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (d *decoder) short() uint16 {
	if p := d.take(2); p != nil {
		return binary.BigEndian.Uint16(p)
	}
	return 0
}

func (d *decoder) long() uint32 {
	if p := d.take(4); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

func (d *decoder) longlong() uint64 {
	if p := d.take(8); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

func (d *decoder) shortstr() string {
	n := int(d.octet())
	return string(d.take(n))
}

// longbytes reads a long string; the length is checked against what the
// input holds before anything is allocated.
func (d *decoder) longbytes() []byte {
	n := d.long()
	if d.err != nil {
		return nil
	}
	if uint64(n) > uint64(d.remaining()) {
		d.err = errShort
		return nil
	}
	return d.take(int(n))
}

func (d *decoder) longstr() string { return string(d.longbytes()) }

func (d *decoder) timestamp() time.Time {
	s := d.longlong()
	if d.err != nil {
		return time.Time{}
	}
	return time.Unix(int64(s), 0).UTC()
}

func appendOctet(b []byte, v uint8) []byte { return append(b, v) }

func appendShort(b []byte, v uint16) []byte { return binary.BigEndian.AppendUint16(b, v) }

func appendLong(b []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(b, v) }

func appendLonglong(b []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(b, v) }

// appendShortstr appends a short string; one longer than 255 bytes is
// truncated (RabbitMQ truncates over-long reply texts the same way).
func appendShortstr(b []byte, s string) []byte {
	if len(s) > math.MaxUint8 {
		s = s[:math.MaxUint8]
	}
	b = append(b, uint8(len(s)))
	return append(b, s...)
}

func appendLongstr(b []byte, s string) []byte {
	b = appendLong(b, uint32(len(s)))
	return append(b, s...)
}

func appendLongbytes(b []byte, p []byte) []byte {
	b = appendLong(b, uint32(len(p)))
	return append(b, p...)
}

func appendTimestamp(b []byte, t time.Time) []byte {
	return appendLonglong(b, uint64(t.Unix()))
}
