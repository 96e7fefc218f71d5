package bodies

import (
	"bytes"
	"errors"
	"testing"

	"github.com/raftmq/raftmq/proto"
	"google.golang.org/protobuf/encoding/protowire"
	gproto "google.golang.org/protobuf/proto"
)

func publishCmd(body []byte) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{
		Vhost: "/", Exchange: "ex", RoutingKey: "rk",
		Properties: &proto.Properties{ContentType: gproto.String("text/plain")},
		Body:       body,
		Channel:    &proto.ChannelRef{Node: "n1", Connection: "c1", Channel: 1},
	}}}
}

func settleCmd() *proto.Command {
	return &proto.Command{Cmd: &proto.Command_Settle{Settle: &proto.Settle{DeliveryTag: 7, Tags: []uint64{1, 2, 3}}}}
}

func tickCmd() *proto.Command { return &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}} }

func envelope(t testing.TB, cmds ...*proto.Command) []byte {
	t.Helper()
	data, err := gproto.Marshal(&proto.Envelope{Version: 1, StampMs: 1234, Commands: cmds})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestEnvelopeBody(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 100_000)
	data := envelope(t, publishCmd([]byte("first")), settleCmd(), publishCmd(nil), tickCmd(), publishCmd(big))
	for _, c := range []struct {
		pos  uint32
		want []byte
		err  bool
	}{
		{pos: 0, want: []byte("first")},
		{pos: 1, err: true},
		{pos: 2, want: []byte{}},
		{pos: 3, err: true},
		{pos: 4, want: big},
		{pos: 5, err: true},
		{pos: 1 << 31, err: true},
	} {
		got, err := EnvelopeBody(data, c.pos)
		if c.err {
			if err == nil {
				t.Errorf("pos %d: got %d bytes, want an error", c.pos, len(got))
			}
			continue
		}
		if err != nil || !bytes.Equal(got, c.want) || got == nil {
			t.Errorf("pos %d: got %q (nil %v), %v; want %d bytes", c.pos, trunc(got), got == nil, err, len(c.want))
		}
	}
	// The body aliases the entry: no copy per Get.
	got, _ := EnvelopeBody(data, 4)
	if &got[0] != &data[bytes.Index(data, big)] {
		t.Error("the body is a copy, not a slice of the entry")
	}
}

func carriesBody(c *proto.Command) bool {
	_, ok := c.Body()
	return ok
}

func trunc(b []byte) []byte {
	if len(b) > 20 {
		return b[:20]
	}
	return b
}

// Hand-made wire forms that proto.Marshal never writes but
// proto.Unmarshal reads: the scanner must read them the same way.
func TestEnvelopeBody_WireCornerCases(t *testing.T) {
	tag := func(b []byte, num protowire.Number, typ protowire.Type) []byte {
		return protowire.AppendTag(b, num, typ)
	}
	msg := func(b []byte, num protowire.Number, inner []byte) []byte {
		return protowire.AppendBytes(tag(b, num, protowire.BytesType), inner)
	}
	publishBody := bodyPaths[cmdPublish][0]
	body := func(s string) []byte { return msg(nil, publishBody, []byte(s)) }
	cmdEnqueue := protowire.Number(61)
	cmdHandOff, handOffMessage := protowire.Number(62), bodyPaths[62][0]
	enqueued := func(s string) []byte { return msg(nil, bodyPaths[cmdEnqueue][0], []byte(s)) }
	env := func(cmds ...[]byte) []byte {
		var b []byte
		b = protowire.AppendVarint(tag(b, 1, protowire.VarintType), 1)
		for _, c := range cmds {
			b = msg(b, envCommands, c)
		}
		return b
	}
	tickNum := protowire.Number(42)
	cases := map[string][]byte{
		// A message field seen twice is merged: the later body wins.
		"merged": env(append(msg(nil, cmdPublish, body("a")), msg(nil, cmdPublish, body("b"))...)),
		// A later occurrence without a body keeps the earlier one.
		"merged keeps": env(append(msg(nil, cmdPublish, body("a")), msg(nil, cmdPublish, nil)...)),
		// Another oneof member in between resets the Publish.
		"oneof reset": env(append(append(msg(nil, cmdPublish, body("a")), msg(nil, tickNum, nil)...), msg(nil, cmdPublish, nil)...)),
		// The last member wins.
		"oneof last": env(append(msg(nil, cmdPublish, body("a")), msg(nil, tickNum, nil)...)),
		// A body of the wrong wire type is an unknown field.
		"body varint": env(msg(nil, cmdPublish, append(body("a"), protowire.AppendVarint(tag(nil, publishBody, protowire.VarintType), 5)...))),
		// A publish of the wrong wire type is an unknown field.
		"publish varint": env(append(msg(nil, cmdPublish, body("a")), protowire.AppendVarint(tag(nil, cmdPublish, protowire.VarintType), 1)...)),
		// A commands field of the wrong wire type is not a command.
		"commands fixed32": append(protowire.AppendFixed32(tag(nil, envCommands, protowire.Fixed32Type), 9), env(msg(nil, cmdPublish, body("z")))...),
		// Unknown fields, a group among them, anywhere.
		"unknown": env(append(append(protowire.AppendVarint(tag(nil, 999, protowire.VarintType), 3), tag(nil, 77, protowire.StartGroupType)...),
			append(tag(nil, 77, protowire.EndGroupType), msg(nil, cmdPublish, append(protowire.AppendVarint(tag(nil, 500, protowire.VarintType), 1), body("u")...))...)...)),
		"empty command": env(nil, msg(nil, cmdPublish, body("second"))),
		// Queue groups' kinds carry bodies too, a HandOff's one level down.
		"enqueue":        env(msg(nil, cmdEnqueue, enqueued("e")), msg(nil, cmdEnqueue, nil)),
		"enqueue merged": env(append(msg(nil, cmdEnqueue, enqueued("a")), msg(nil, cmdEnqueue, enqueued("b"))...)),
		"hand-off":       env(msg(nil, cmdHandOff, msg(nil, handOffMessage, enqueued("h"))), msg(nil, cmdHandOff, nil)),
		// The message seen twice in one HandOff, or in two occurrences of
		// it, is merged: the later body wins, a later one without keeps it.
		"hand-off merged": env(msg(nil, cmdHandOff, append(msg(nil, handOffMessage, enqueued("a")), msg(nil, handOffMessage, nil)...)),
			append(msg(nil, cmdHandOff, msg(nil, handOffMessage, enqueued("a"))), msg(nil, cmdHandOff, msg(nil, handOffMessage, enqueued("b")))...)),
		// A publish's body field number inside a HandOff is not a body.
		"hand-off body field": env(msg(nil, cmdHandOff, enqueued("x")), append(msg(nil, cmdPublish, body("p")), msg(nil, cmdHandOff, nil)...)),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) { checkAgainstUnmarshal(t, data) })
	}
}

// checkAgainstUnmarshal checks EnvelopeBody against proto.Unmarshal at
// every position, when data unmarshals; it must not panic on any data.
func checkAgainstUnmarshal(t *testing.T, data []byte) {
	t.Helper()
	var env proto.Envelope
	uerr := gproto.Unmarshal(data, &env)
	n := uint32(len(env.GetCommands()))
	for pos := range n + 2 {
		got, err := EnvelopeBody(data, pos)
		if uerr != nil {
			continue
		}
		if pos >= n {
			if err == nil {
				t.Fatalf("pos %d of %d commands: no error", pos, n)
			}
			continue
		}
		want, ok := env.GetCommands()[pos].Body()
		if !ok {
			if err == nil {
				t.Fatalf("pos %d carries no body (%T) but gave %q", pos, env.GetCommands()[pos].GetCmd(), trunc(got))
			}
			continue
		}
		if err != nil || !bytes.Equal(got, want) || got == nil {
			t.Fatalf("pos %d: got %q, %v; Unmarshal says %q", pos, trunc(got), err, trunc(want))
		}
	}
}

func FuzzEnvelopeBody(f *testing.F) {
	f.Add(envelope(f, publishCmd([]byte("a")), settleCmd(), publishCmd([]byte("bb"))))
	f.Add(envelope(f, tickCmd()))
	f.Add(envelope(f))
	f.Add([]byte{0x1a, 0x03, 0xf2, 0x01, 0x00})
	f.Add([]byte{0x1a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAgainstUnmarshal(t, data)
		if e, err := scanEntry(data); err == nil {
			for pos := range uint32(len(e.bodies)) {
				a, aerr := e.body(pos)
				b, berr := EnvelopeBody(data, pos)
				if (aerr == nil) != (berr == nil) || !bytes.Equal(a, b) {
					t.Fatalf("pos %d: scanEntry %q %v, EnvelopeBody %q %v", pos, trunc(a), aerr, trunc(b), berr)
				}
			}
		}
	})
}

// entryCases are entries of the shapes a log holds: batches of
// publishes among other commands, empty and absent bodies, a large
// publish (over the 4 MiB that the node's log keeps inline), and the
// wire forms proto.Marshal does not write.
func entryCases(t testing.TB) map[string][]byte {
	batch := func(n, size int) []*proto.Command {
		var cmds []*proto.Command
		for i := range n {
			cmds = append(cmds, publishCmd(body(Key{Index: 7, Pos: uint32(i)}, size)))
		}
		return cmds
	}
	headers := publishCmd([]byte("with headers"))
	headers.GetPublish().Mandatory = true
	headers.GetPublish().Properties.Headers = &proto.Table{Fields: []*proto.Field{
		{Key: "x-delay", Value: &proto.Value{Kind: &proto.Value_Int64{Int64: 5000}}},
	}}
	noBody := publishCmd(nil)
	noBody.GetPublish().Body = nil
	return map[string][]byte{
		"batch of 130":      envelope(t, batch(130, 1024)...),
		"one publish":       envelope(t, publishCmd([]byte("only"))),
		"empty bodies":      envelope(t, publishCmd([]byte{}), publishCmd([]byte("x")), noBody, publishCmd([]byte{})),
		"mixed":             envelope(t, settleCmd(), publishCmd([]byte("a")), tickCmd(), headers, settleCmd(), publishCmd([]byte("b"))),
		"ignorable":         envelope(t, &proto.Command{Ignorable: true, Cmd: &proto.Command_Publish{Publish: &proto.Publish{Body: []byte("ig")}}}),
		"large":             envelope(t, publishCmd([]byte("before")), publishCmd(bytes.Repeat([]byte{0xa5}, 5<<20)), publishCmd([]byte("after"))),
		"no commands":       envelope(t),
		"empty data":        {},
		"no publish":        envelope(t, settleCmd(), tickCmd()),
		"empty command":     envelope(t, &proto.Command{}, publishCmd([]byte("second"))),
		"version and stamp": append(envelope(t, publishCmd([]byte("p"))), envelope(t, publishCmd([]byte("q")))...),
		"truncated":         envelope(t, batch(3, 100)...)[:250],
	}
}

// The scan (EnvelopeBody), entryBody and the decode of the whole entry
// give the same body, or the same kind of error, at every position of
// every entry shape; and the scan serves every Publish itself.
func TestEntryBody_AgreesWithDecode(t *testing.T) {
	for name, data := range entryCases(t) {
		t.Run(name, func(t *testing.T) {
			var env proto.Envelope
			uerr := gproto.Unmarshal(data, &env)
			n := uint32(len(env.GetCommands()))
			publishes := 0
			for pos := range n + 2 {
				want, werr := decodedBody(data, pos)
				fast, ferr := EnvelopeBody(data, pos)
				got, gerr := entryBody(data, pos)
				if uerr != nil {
					// A damaged entry: the scan does not read past
					// the command it wants, so it may serve one
					// before the damage. The entry was applied, so
					// it unmarshalled then: the log's checksums catch
					// damage since. It must not panic.
					continue
				}
				if pos < n && carriesBody(env.GetCommands()[pos]) {
					publishes++
					if werr != nil || ferr != nil || gerr != nil {
						t.Fatalf("pos %d: decode %v, scan %v, entryBody %v", pos, werr, ferr, gerr)
					}
					if !bytes.Equal(fast, want) || !bytes.Equal(got, want) || fast == nil || got == nil {
						t.Fatalf("pos %d: scan %q, entryBody %q; the decode says %q", pos, trunc(fast), trunc(got), trunc(want))
					}
					continue
				}
				if werr == nil || ferr == nil || gerr == nil {
					t.Fatalf("pos %d: decode %q %v, scan %q %v, entryBody %q %v: want errors", pos, trunc(want), werr, trunc(fast), ferr, trunc(got), gerr)
				}
				for _, kind := range []error{errNoCommand, errNotPublish, errNotEnvelope} {
					if errors.Is(gerr, kind) != errors.Is(werr, kind) {
						t.Fatalf("pos %d: entryBody %v, the decode %v", pos, gerr, werr)
					}
				}
			}
			if name == "batch of 130" && publishes != 130 {
				t.Fatalf("%d publishes", publishes)
			}
		})
	}
}
