package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// Field is one entry of a field table.
type Field struct {
	Key   string
	Value any
}

// Table is an AMQP field table that keeps its fields in wire order. Values
// are bool, int8, uint8, int16, uint16, int32, uint32, int64, float32,
// float64, Decimal, string (long string), []byte (byte array), time.Time,
// Table, []any (field array) or nil (void).
type Table []Field

// Decimal is an AMQP decimal: Value / 10^Scale.
type Decimal struct {
	Scale uint8
	Value int32
}

// maxTableDepth bounds the nesting of tables and arrays a decoder accepts.
const maxTableDepth = 64

// Get returns the value of the first field named key.
func (t Table) Get(key string) (any, bool) {
	for _, f := range t {
		if f.Key == key {
			return f.Value, true
		}
	}
	return nil, false
}

// Validate reports the first value whose Go type has no field-table
// encoding. AppendTable writes such a value as void.
func (t Table) Validate() error {
	for _, f := range t {
		if err := validateValue(f.Value); err != nil {
			return fmt.Errorf("field %q: %w", f.Key, err)
		}
	}
	return nil
}

func validateValue(v any) error {
	switch v := v.(type) {
	case nil, bool, int8, uint8, int16, uint16, int32, uint32, int64, float32, float64,
		Decimal, string, []byte, time.Time:
		return nil
	case Table:
		return v.Validate()
	case []any:
		for i, e := range v {
			if err := validateValue(e); err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
		}
		return nil
	}
	return fmt.Errorf("unsupported field value type %T", v)
}

// AppendTable appends t as a field table (long length, then the fields).
func AppendTable(b []byte, t Table) []byte { return appendTable(b, t) }

// ReadTable decodes one field table (length-prefixed) from p and returns
// it with the number of bytes it used.
func ReadTable(p []byte) (Table, int, error) {
	d := decoder{b: p}
	t := d.table()
	if d.err != nil {
		return nil, 0, d.err
	}
	return t, d.off, nil
}

func appendTable(b []byte, t Table) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	for _, f := range t {
		b = appendShortstr(b, f.Key)
		b = appendValue(b, f.Value)
	}
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

func appendArray(b []byte, a []any) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	for _, v := range a {
		b = appendValue(b, v)
	}
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

// appendValue writes a type code and a value with the codes RabbitMQ and
// its clients use.
func appendValue(b []byte, v any) []byte {
	switch v := v.(type) {
	case bool:
		x := uint8(0)
		if v {
			x = 1
		}
		return append(b, 't', x)
	case int8:
		return append(b, 'b', uint8(v))
	case uint8:
		return append(b, 'B', v)
	case int16:
		return appendShort(append(b, 's'), uint16(v))
	case uint16:
		return appendShort(append(b, 'u'), v)
	case int32:
		return appendLong(append(b, 'I'), uint32(v))
	case uint32:
		return appendLong(append(b, 'i'), v)
	case int64:
		return appendLonglong(append(b, 'l'), uint64(v))
	case float32:
		return appendLong(append(b, 'f'), math.Float32bits(v))
	case float64:
		return appendLonglong(append(b, 'd'), math.Float64bits(v))
	case Decimal:
		return appendLong(append(b, 'D', v.Scale), uint32(v.Value))
	case string:
		return appendLongstr(append(b, 'S'), v)
	case []byte:
		return appendLongbytes(append(b, 'x'), v)
	case time.Time:
		return appendTimestamp(append(b, 'T'), v)
	case Table:
		return appendTable(append(b, 'F'), v)
	case []any:
		return appendArray(append(b, 'A'), v)
	}
	return append(b, 'V')
}

// table reads a length-prefixed field table.
func (d *decoder) table() Table {
	body := d.longbytes()
	if d.err != nil || len(body) == 0 {
		return nil
	}
	if d.depth >= maxTableDepth {
		d.fail("field tables nested deeper than %d", maxTableDepth)
		return nil
	}
	sub := decoder{b: body, depth: d.depth + 1}
	var t Table
	for sub.err == nil && sub.remaining() > 0 {
		key := sub.shortstr()
		v := sub.value()
		if sub.err != nil {
			break
		}
		t = append(t, Field{Key: key, Value: v})
	}
	if sub.err != nil {
		d.err = fmt.Errorf("field table: %w", sub.err)
		return nil
	}
	return t
}

func (d *decoder) array() []any {
	body := d.longbytes()
	if d.err != nil {
		return nil
	}
	if d.depth >= maxTableDepth {
		d.fail("field arrays nested deeper than %d", maxTableDepth)
		return nil
	}
	sub := decoder{b: body, depth: d.depth + 1}
	a := []any{}
	for sub.err == nil && sub.remaining() > 0 {
		v := sub.value()
		if sub.err != nil {
			break
		}
		a = append(a, v)
	}
	if sub.err != nil {
		d.err = fmt.Errorf("field array: %w", sub.err)
		return nil
	}
	return a
}

// value reads one typed field value in RabbitMQ's dialect ('s' is a signed
// 16-bit integer). 'U' and 'L' are read as signed 16 and 64-bit integers
// for peers that follow the specification's table.
func (d *decoder) value() any {
	code := d.octet()
	if d.err != nil {
		return nil
	}
	switch code {
	case 't':
		return d.octet() != 0
	case 'b':
		return int8(d.octet())
	case 'B':
		return d.octet()
	case 's', 'U':
		return int16(d.short())
	case 'u':
		return d.short()
	case 'I':
		return int32(d.long())
	case 'i':
		return d.long()
	case 'l', 'L':
		return int64(d.longlong())
	case 'f':
		return math.Float32frombits(d.long())
	case 'd':
		return math.Float64frombits(d.longlong())
	case 'D':
		scale := d.octet()
		return Decimal{Scale: scale, Value: int32(d.long())}
	case 'S':
		return d.longstr()
	case 'x':
		p := d.longbytes()
		return append([]byte{}, p...)
	case 'T':
		return d.timestamp()
	case 'F':
		t := d.table()
		if t == nil {
			t = Table{}
		}
		return t
	case 'A':
		return d.array()
	case 'V':
		return nil
	}
	d.fail("unknown field type %q", code)
	return nil
}
