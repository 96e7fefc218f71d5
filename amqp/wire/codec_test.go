package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/raftmq/raftmq/internal/replycode"
)

// sampleTable holds one value of every supported type.
func sampleTable() Table {
	return Table{
		{"bool", true},
		{"int8", int8(-8)},
		{"uint8", uint8(200)},
		{"int16", int16(-1600)},
		{"uint16", uint16(60000)},
		{"int32", int32(-320000)},
		{"uint32", uint32(4000000000)},
		{"int64", int64(-64000000000)},
		{"float32", float32(3.25)},
		{"float64", float64(-6.5e100)},
		{"decimal", Decimal{Scale: 2, Value: -12345}},
		{"string", "long string\x00with a NUL"},
		{"bytes", []byte{0, 1, 2, 255}},
		{"time", time.Unix(1700000000, 0).UTC()},
		{"table", Table{{"nested", int32(1)}, {"empty", Table{}}}},
		{"array", []any{int32(1), "two", []any{}, Table{{"k", nil}}, nil}},
		{"void", nil},
	}
}

func TestMethod_RoundTripEveryMethod(t *testing.T) {
	seen := map[[2]uint16]bool{}
	for _, m := range sampleMethods() {
		t.Run(m.Name(), func(t *testing.T) {
			seen[[2]uint16{m.ClassID(), m.MethodID()}] = true
			payload := m.AppendTo(nil)
			got, err := DecodeMethod(payload)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !reflect.DeepEqual(got, m) {
				t.Fatalf("round trip:\n got %#v\nwant %#v", got, m)
			}
			// Every proper prefix is an error, never a panic.
			for i := 0; i < len(payload); i++ {
				if _, err := DecodeMethod(payload[:i]); err == nil && hasFields(m) {
					if i >= 4 {
						t.Fatalf("decoding %d of %d bytes succeeded", i, len(payload))
					}
				}
			}
		})
	}
	for _, want := range [][2]uint16{{10, 10}, {20, 40}, {40, 30}, {40, 40}, {60, 120}, {85, 10}, {90, 30}} {
		if !seen[want] {
			t.Errorf("method %d.%d is missing from the generated set", want[0], want[1])
		}
	}
}

// hasFields reports whether a method has any field (a field-less method
// decodes from its 4-byte id alone).
func hasFields(m Method) bool { return reflect.ValueOf(m).Elem().NumField() > 0 }

func TestMethod_BitsArePacked(t *testing.T) {
	m := &QueueDeclare{Queue: "q", Passive: true, Exclusive: true, NoWait: true}
	p := m.AppendTo(nil)
	// class, method, reserved-1 (short), queue (shortstr), bits, table.
	want := []byte{0, 50, 0, 10, 0, 0, 1, 'q', 1<<0 | 1<<2 | 1<<4, 0, 0, 0, 0}
	if !bytes.Equal(p, want) {
		t.Fatalf("queue.declare = %x, want %x", p, want)
	}
	n := &BasicNack{DeliveryTag: 7, Multiple: false, Requeue: true}
	p = n.AppendTo(nil)
	if p[len(p)-1] != 1<<1 {
		t.Fatalf("basic.nack bits = %08b, want requeue at bit 1", p[len(p)-1])
	}
}

func TestDecodeMethod_Unknown(t *testing.T) {
	_, err := DecodeMethod([]byte{0, 60, 0, 99})
	e, ok := AsError(err)
	if !ok || e.Code != replycode.CommandInvalid || !e.Hard {
		t.Fatalf("unknown method: %v", err)
	}
	_, err = DecodeMethod([]byte{0, 60})
	if e, ok := AsError(err); !ok || e.Code != replycode.FrameError {
		t.Fatalf("short method: %v", err)
	}
}

func TestProperties_RoundTrip(t *testing.T) {
	h := &ContentHeader{ClassID: ClassBasic, BodySize: 1 << 40, Properties: sampleProperties()}
	p := h.AppendTo(nil)
	got, err := DecodeContentHeader(p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, h) {
		t.Fatalf("round trip:\n got %#v\nwant %#v", got, h)
	}
	if got.Properties.Flags != 0xfffc {
		t.Fatalf("flags = %#04x, want every property (0xfffc)", got.Properties.Flags)
	}
	// Only the flagged properties are written.
	h2 := &ContentHeader{ClassID: ClassBasic, Properties: Properties{Flags: FlagDeliveryMode, DeliveryMode: 2, ContentType: "ignored"}}
	p2 := h2.AppendTo(nil)
	if want := []byte{0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0x00, 2}; !bytes.Equal(p2, want) {
		t.Fatalf("header = %x, want %x", p2, want)
	}
	for i := 0; i < len(p); i++ {
		if _, err := DecodeContentHeader(p[:i]); err == nil {
			t.Fatalf("decoding %d of %d bytes succeeded", i, len(p))
		}
	}
}

func TestTable_RoundTripKeepsOrderAndTypes(t *testing.T) {
	tab := sampleTable()
	p := AppendTable(nil, tab)
	got, n, err := ReadTable(p)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(p) {
		t.Fatalf("used %d of %d bytes", n, len(p))
	}
	if !reflect.DeepEqual(got, tab) {
		t.Fatalf("round trip:\n got %#v\nwant %#v", got, tab)
	}
	if err := tab.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (Table{{"x", struct{}{}}}).Validate(); err == nil {
		t.Fatal("Validate accepted a struct")
	}
}

func TestTable_TypeCodes(t *testing.T) {
	cases := []struct {
		v    any
		code byte
	}{
		{true, 't'}, {int8(1), 'b'}, {uint8(1), 'B'}, {int16(1), 's'}, {uint16(1), 'u'},
		{int32(1), 'I'}, {uint32(1), 'i'}, {int64(1), 'l'}, {float32(1), 'f'}, {float64(1), 'd'},
		{Decimal{}, 'D'}, {"s", 'S'}, {[]byte("x"), 'x'}, {time.Unix(1, 0), 'T'},
		{Table{}, 'F'}, {[]any{}, 'A'}, {nil, 'V'},
	}
	for _, c := range cases {
		p := AppendTable(nil, Table{{"k", c.v}})
		if p[4+2] != c.code {
			t.Errorf("%T encodes as %q, want %q", c.v, p[6], c.code)
		}
	}
}

func TestTable_Malformed(t *testing.T) {
	cases := map[string][]byte{
		"length beyond input":  {0, 0, 0, 10, 1, 'k'},
		"huge length":          {0xff, 0xff, 0xff, 0xff},
		"unknown type":         {0, 0, 0, 3, 1, 'k', 'Z'},
		"truncated value":      {0, 0, 0, 4, 1, 'k', 'I', 0},
		"key beyond table":     {0, 0, 0, 2, 9, 'k'},
		"string beyond table":  {0, 0, 0, 7, 1, 'k', 'S', 0, 0, 0, 9},
		"huge nested string":   {0, 0, 0, 7, 1, 'k', 'S', 0xff, 0xff, 0xff, 0xff},
		"array beyond element": {0, 0, 0, 8, 1, 'k', 'A', 0, 0, 0, 1, 'Q'},
	}
	for name, p := range cases {
		if _, _, err := ReadTable(p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	// Deep nesting is refused, not recursed into without bound.
	deep := AppendTable(nil, Table{{"k", nest(100)}})
	if _, _, err := ReadTable(deep); err == nil {
		t.Error("100 nested arrays accepted")
	}
	if _, _, err := ReadTable(AppendTable(nil, Table{{"k", nest(10)}})); err != nil {
		t.Errorf("10 nested arrays: %v", err)
	}
}

func nest(n int) any {
	var v any = int32(1)
	for i := 0; i < n; i++ {
		v = []any{v}
	}
	return v
}

func TestReadFrame(t *testing.T) {
	var b []byte
	b = AppendMethodFrame(b, 3, &ChannelOpen{})
	b = AppendHeartbeat(b)
	r := bufio.NewReader(bytes.NewReader(b))
	f, err := ReadFrame(r, FrameMinSize)
	if err != nil || f.Type != FrameMethod || f.Channel != 3 {
		t.Fatalf("frame %v, %v", f, err)
	}
	m, err := DecodeMethod(f.Payload)
	if err != nil || m.Name() != "channel.open" {
		t.Fatalf("method %v, %v", m, err)
	}
	f, err = ReadFrame(r, FrameMinSize)
	if err != nil || f.Type != FrameHeartbeat || len(f.Payload) != 0 {
		t.Fatalf("heartbeat %v, %v", f, err)
	}
	if _, err := ReadFrame(r, FrameMinSize); err != io.EOF {
		t.Fatalf("at the end: %v, want EOF", err)
	}
}

func TestReadFrame_Errors(t *testing.T) {
	big := AppendFrame(nil, FrameBody, 1, make([]byte, 5000))
	badEnd := AppendFrame(nil, FrameBody, 1, []byte("x"))
	badEnd[len(badEnd)-1] = 0
	cases := map[string]struct {
		in   []byte
		code uint16
	}{
		"over frame-max":         {big, replycode.FrameError},
		"huge declared size":     {[]byte{FrameBody, 0, 1, 0xff, 0xff, 0xff, 0xff}, replycode.FrameError},
		"wrong frame end":        {badEnd, replycode.FrameError},
		"unknown type":           {AppendFrame(nil, 9, 0, nil), replycode.FrameError},
		"heartbeat on a channel": {AppendFrame(nil, FrameHeartbeat, 1, nil), replycode.FrameError},
		"truncated":              {AppendFrame(nil, FrameBody, 1, make([]byte, 300))[:100], 0},
		"truncated header":       {AppendFrame(nil, FrameBody, 1, nil)[:4], 0},
	}
	for name, c := range cases {
		_, err := ReadFrame(bufio.NewReader(bytes.NewReader(c.in)), FrameMinSize)
		if c.code == 0 {
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("%s: %v, want unexpected EOF", name, err)
			}
			continue
		}
		e, ok := AsError(err)
		if !ok || e.Code != c.code || !e.Hard {
			t.Errorf("%s: %v, want hard error %d", name, err, c.code)
		}
	}
	// The same big frame is fine when frame-max allows it.
	if _, err := ReadFrame(bufio.NewReader(bytes.NewReader(big)), 5008); err != nil {
		t.Errorf("frame of exactly frame-max: %v", err)
	}
}

func TestAppendContent_SplitsBody(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789"), 1000)
	props := Properties{Flags: FlagContentType, ContentType: "text/plain"}
	b := AppendContent(nil, 5, &BasicDeliver{ConsumerTag: "c", DeliveryTag: 1}, &props, body, FrameMinSize)
	r := bufio.NewReader(bytes.NewReader(b))
	var frames []Frame
	for {
		f, err := ReadFrame(r, FrameMinSize)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
	}
	if len(frames) != 5 || frames[0].Type != FrameMethod || frames[1].Type != FrameHeader {
		t.Fatalf("%d frames: %v", len(frames), frames)
	}
	h, err := DecodeContentHeader(frames[1].Payload)
	if err != nil || h.BodySize != uint64(len(body)) || h.Properties.ContentType != "text/plain" {
		t.Fatalf("header %+v, %v", h, err)
	}
	var got []byte
	for _, f := range frames[2:] {
		if len(f.Payload) > FrameMinSize-FrameOverhead {
			t.Fatalf("body frame of %d bytes", len(f.Payload))
		}
		got = append(got, f.Payload...)
	}
	if !bytes.Equal(got, body) {
		t.Fatal("body differs")
	}
}

func TestError_Close(t *testing.T) {
	e := ChanError(replycode.NotFound, 50, 10, "no queue '%s' in vhost '/'", "q")
	c, ok := e.Close().(*ChannelClose)
	if !ok || c.ReplyCode != 404 || c.FailingClassID != 50 || c.FailingMethodID != 10 || c.ReplyText != "NOT_FOUND - no queue 'q' in vhost '/'" {
		t.Fatalf("close = %#v", e.Close())
	}
	h := ConnError(replycode.FrameError, 0, 0, "bad")
	if _, ok := h.Close().(*ConnectionClose); !ok {
		t.Fatalf("hard error closes with %T", h.Close())
	}
	if !replycode.IsHard(replycode.NotAllowed) || replycode.IsHard(replycode.NotFound) || replycode.Name(replycode.PreconditionFailed) != "PRECONDITION_FAILED" {
		t.Fatal("reply code tables are wrong")
	}
	long := ChanError(replycode.NotFound, 0, 0, "%s", string(bytes.Repeat([]byte("x"), 400))).Close().AppendTo(nil)
	if _, err := DecodeMethod(long); err != nil {
		t.Fatalf("a long reply text must still encode: %v", err)
	}
}

// BenchmarkReadFrame is one body frame of 1 KiB; its payload is the one
// allocation.
func BenchmarkReadFrame(b *testing.B) {
	frame := AppendFrame(nil, FrameBody, 1, make([]byte, 1024))
	in := bytes.NewReader(frame)
	r := bufio.NewReader(in)
	b.ReportAllocs()
	for b.Loop() {
		in.Reset(frame)
		r.Reset(in)
		if _, err := ReadFrame(r, FrameMinSize); err != nil {
			b.Fatal(err)
		}
	}
}
