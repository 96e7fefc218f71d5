package wire

import (
	"bufio"
	"bytes"
	"encoding/hex"
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
