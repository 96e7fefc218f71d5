package wire

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"reflect"
	"strings"
	"testing"
)

func goldenSeeds(f *testing.F, payloadOnly bool) {
	for _, g := range goldenFrames {
		raw, _ := hex.DecodeString(g.hex)
		if payloadOnly {
			raw = raw[FrameHeaderSize : len(raw)-1]
		}
		f.Add(raw)
	}
}

func FuzzReadFrame(f *testing.F) {
	goldenSeeds(f, false)
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		var out []byte
		for {
			fr, err := ReadFrame(r, FrameMinSize)
			if err != nil {
				break
			}
			if len(fr.Payload) > FrameMinSize-FrameOverhead {
				t.Fatalf("payload of %d bytes over frame-max", len(fr.Payload))
			}
			out = AppendFrame(out, fr.Type, fr.Channel, fr.Payload)
			switch fr.Type {
			case FrameMethod:
				_, _ = DecodeMethod(fr.Payload)
			case FrameHeader:
				_, _ = DecodeContentHeader(fr.Payload)
			}
		}
		// The frames read are a prefix of the input, byte for byte.
		if !bytes.HasPrefix(data, out) {
			t.Fatalf("re-encoded frames are not a prefix of the input")
		}
	})
}

func FuzzDecodeMethod(f *testing.F) {
	goldenSeeds(f, true)
	for _, m := range sampleMethods() {
		f.Add(m.AppendTo(nil))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeMethod(data)
		if err != nil {
			if _, ok := AsError(err); !ok {
				t.Fatalf("error %v is not a *wire.Error", err)
			}
			return
		}
		// Decoding what we encode gives the same encoding again.
		p := m.AppendTo(nil)
		m2, err := DecodeMethod(p)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", m.Name(), err)
		}
		if p2 := m2.AppendTo(nil); !bytes.Equal(p, p2) {
			t.Fatalf("%s: encoding is not stable:\n%x\n%x", m.Name(), p, p2)
		}
		if h, err := DecodeContentHeader(data); err == nil {
			_ = h.AppendTo(nil)
		}
	})
}

func FuzzReadTable(f *testing.F) {
	f.Add(AppendTable(nil, sampleTable()))
	f.Add(AppendTable(nil, Table{{"k", nest(70)}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		tab, n, err := ReadTable(data)
		if err != nil {
			return
		}
		if n > len(data) {
			t.Fatalf("used %d of %d bytes", n, len(data))
		}
		if err := tab.Validate(); err != nil {
			t.Fatalf("decoded table does not validate: %v", err)
		}
		p := AppendTable(nil, tab)
		tab2, _, err := ReadTable(p)
		if err != nil {
			t.Fatalf("re-reading: %v", err)
		}
		if p2 := AppendTable(nil, tab2); !bytes.Equal(p, p2) {
			t.Fatalf("encoding is not stable")
		}
	})
}

// shortStringSamples seed the short-string fuzzers: ASCII, valid UTF-8,
// bytes that are not UTF-8, NUL and the longest short string.
func shortStringSamples(f *testing.F) {
	long := strings.Repeat("\xff", 255)
	f.Add("amq.direct", "rk", "id", "x-key")
	f.Add("ex\xff", "r\x00k", "\xc3(", "h\xfe\xfe")
	f.Add("", "", "", "")
	f.Add("ключ", "键", "\xed\xa0\x80", long)
}

// clip is what a short string can carry.
func clip(s string) string {
	if len(s) > 255 {
		return s[:255]
	}
	return s
}

// Short strings and table keys are any bytes: every method field, property
// and header key made of them is read back exactly as it was written, and
// re-encodes to the same bytes.
func FuzzShortStringsRoundTrip(f *testing.F) {
	shortStringSamples(f)
	f.Fuzz(func(t *testing.T, a, b, c, d string) {
		a, b, c = clip(a), clip(b), clip(c)
		args := Table{{Key: c, Value: d}, {Key: a, Value: Table{{Key: b, Value: []byte(d)}}}}
		methods := []Method{
			&BasicPublish{Exchange: a, RoutingKey: b},
			&BasicDeliver{ConsumerTag: c, DeliveryTag: 1, Exchange: a, RoutingKey: b},
			&BasicConsume{Queue: a, ConsumerTag: b, Arguments: args},
			&QueueDeclare{Queue: a, Arguments: args},
			&QueueBind{Queue: a, Exchange: b, RoutingKey: c, Arguments: args},
			&ExchangeDeclare{Exchange: a, Type: b, Arguments: args},
		}
		hdr := &ContentHeader{ClassID: ClassBasic, BodySize: 3, Properties: Properties{
			Flags: FlagContentType | FlagContentEncoding | FlagHeaders | FlagCorrelationID | FlagReplyTo |
				FlagExpiration | FlagMessageID | FlagType | FlagUserID | FlagAppID | FlagClusterID,
			ContentType: a, ContentEncoding: b, Headers: args, CorrelationID: c, ReplyTo: a,
			Expiration: b, MessageID: a, Type: b, UserID: c, AppID: a, ClusterID: c,
		}}
		var stream []byte
		for _, m := range methods {
			stream = AppendMethodFrame(stream, 1, m)
		}
		stream = AppendHeaderFrame(stream, 1, hdr)
		r := bufio.NewReader(bytes.NewReader(stream))
		for _, m := range methods {
			fr, err := ReadFrame(r, 1<<20)
			if err != nil {
				t.Fatalf("%s: read frame: %v", m.Name(), err)
			}
			got, err := DecodeMethod(fr.Payload)
			if err != nil {
				t.Fatalf("%s: decode: %v", m.Name(), err)
			}
			if !reflect.DeepEqual(got, m) {
				t.Fatalf("%s changed:\n got %#v\nwant %#v", m.Name(), got, m)
			}
			if p := got.AppendTo(nil); !bytes.Equal(p, fr.Payload) {
				t.Fatalf("%s re-encodes differently", m.Name())
			}
		}
		fr, err := ReadFrame(r, 1<<20)
		if err != nil {
			t.Fatalf("header: read frame: %v", err)
		}
		h, err := DecodeContentHeader(fr.Payload)
		if err != nil {
			t.Fatalf("header: decode: %v", err)
		}
		if !reflect.DeepEqual(h, hdr) {
			t.Fatalf("properties changed:\n got %#v\nwant %#v", h.Properties, hdr.Properties)
		}
	})
}
