package proto_test

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/raftmq/raftmq/proto"
	"google.golang.org/protobuf/encoding/protowire"
	gproto "google.golang.org/protobuf/proto"
)

func strp(s string) *string { return &s }
func u32p(v uint32) *uint32 { return &v }

func publishCmd(body []byte) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{
		Vhost: "/", Exchange: "amq.direct", RoutingKey: "q1", Mandatory: true,
		Properties: &proto.Properties{ContentType: strp("text/plain"), DeliveryMode: u32p(2),
			Headers: &proto.Table{Fields: []*proto.Field{{Key: "x-retry", Value: &proto.Value{Kind: &proto.Value_Int32{Int32: 3}}}}}},
		Body:    body,
		Channel: &proto.ChannelRef{Node: "n1", Connection: "c1", Channel: 1},
	}}}
}

func enqueueCmd(body []byte) *proto.Command {
	return &proto.Command{Ignorable: true, Cmd: &proto.Command_Enqueue{Enqueue: &proto.Enqueue{
		Vhost: "/", Exchange: "", RoutingKey: "q2", Body: body, Queues: []string{"q2", "q3"},
		Channel: &proto.ChannelRef{Node: "n2", Connection: "c9", Channel: 7},
	}}}
}

// entries are envelopes of the shapes raftmq writes, and marshalled data
// of shapes it does not.
func entries(t testing.TB) map[string][]byte {
	t.Helper()
	m := func(env *proto.Envelope) []byte {
		b, err := gproto.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	body := bytes.Repeat([]byte("abcdefgh"), 128)
	out := map[string][]byte{
		"publishes": m(&proto.Envelope{Version: 1, StampMs: 1700000000000, Commands: []*proto.Command{
			publishCmd(body), publishCmd([]byte("x")), publishCmd(nil)}}),
		"enqueues and others": m(&proto.Envelope{Version: 1, StampMs: 5, Commands: []*proto.Command{
			enqueueCmd(body), {Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{Vhost: "/", Name: "q"}}}, publishCmd(body)}}),
		"empty":       m(&proto.Envelope{}),
		"no commands": m(&proto.Envelope{Version: 1, StampMs: -1}),
	}
	pub := m(&proto.Envelope{Commands: []*proto.Command{publishCmd(body)}})
	// A body field twice in one Publish: the last one wins.
	cmd, _ := gproto.Marshal(publishCmd([]byte("first")))
	p2, _ := gproto.Marshal(&proto.Publish{Body: []byte("second"), Exchange: "later"})
	cmd = protowire.AppendTag(cmd, 30, protowire.BytesType)
	cmd = protowire.AppendBytes(cmd, p2)
	out["publish twice"] = protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), cmd)
	// A field the envelope does not know, and a command with a flag after its member.
	out["unknown field"] = protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), pub...), 99, protowire.VarintType), 7)
	flagLast, _ := gproto.Marshal(publishCmd(body))
	flagLast = protowire.AppendVarint(protowire.AppendTag(flagLast, 1, protowire.VarintType), 1)
	out["flag after member"] = protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), flagLast)
	// A body with the wrong wire type, and data cut short.
	wrong := protowire.AppendVarint(protowire.AppendTag(nil, 6, protowire.VarintType), 1)
	wrongCmd := protowire.AppendBytes(protowire.AppendTag(nil, 30, protowire.BytesType), wrong)
	out["body of the wrong type"] = protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), wrongCmd)
	out["cut short"] = pub[:len(pub)-100]
	out["garbage"] = []byte{0xff, 0xff, 0xff, 0x01, 0x1a, 0x05}
	return out
}

// UnmarshalEnvelope gives what proto.Unmarshal gives, for every shape.
func TestUnmarshalEnvelope_AsProtoUnmarshal(t *testing.T) {
	for name, data := range entries(t) {
		t.Run(name, func(t *testing.T) { sameAsProto(t, data) })
	}
}

func sameAsProto(t *testing.T, data []byte) {
	t.Helper()
	want, got := &proto.Envelope{}, &proto.Envelope{}
	werr := gproto.Unmarshal(data, want)
	gerr := proto.UnmarshalEnvelope(data, got)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("proto.Unmarshal: %v; UnmarshalEnvelope: %v", werr, gerr)
	}
	if werr == nil && !gproto.Equal(want, got) {
		t.Fatalf("decoded differently:\nproto.Unmarshal   %v\nUnmarshalEnvelope %v", want, got)
	}
}

// The bodies alias the entry's data, capped at their length.
func TestUnmarshalEnvelope_BodiesAliasData(t *testing.T) {
	data := entries(t)["enqueues and others"]
	env := &proto.Envelope{}
	if err := proto.UnmarshalEnvelope(data, env); err != nil {
		t.Fatal(err)
	}
	start, end := uintptr(unsafe.Pointer(unsafe.SliceData(data))), uintptr(unsafe.Pointer(unsafe.SliceData(data)))+uintptr(len(data))
	for _, i := range []int{0, 2} {
		body, ok := env.GetCommands()[i].Body()
		if !ok || len(body) != 1024 {
			t.Fatalf("command %d: body of %d bytes, ok %v", i, len(body), ok)
		}
		if p := uintptr(unsafe.Pointer(unsafe.SliceData(body))); p < start || p >= end {
			t.Fatalf("command %d: the body was copied", i)
		}
		if cap(body) != len(body) {
			t.Fatalf("command %d: cap %d past the body's %d bytes", i, cap(body), len(body))
		}
	}
}

// Headers nested to the recursion limit are refused where proto.Unmarshal
// refuses them, and no earlier.
func TestUnmarshalEnvelope_RecursionLimitAsProto(t *testing.T) {
	failed := false
	for depth := 4990; depth <= 5002; depth++ {
		v := &proto.Value{Kind: &proto.Value_Bool{Bool: true}}
		for range depth {
			v = &proto.Value{Kind: &proto.Value_Array{Array: &proto.Array{Values: []*proto.Value{v}}}}
		}
		c := publishCmd([]byte("body"))
		c.GetPublish().Properties.Headers = &proto.Table{Fields: []*proto.Field{{Key: "deep", Value: v}}}
		data, err := gproto.MarshalOptions{}.Marshal(&proto.Envelope{Commands: []*proto.Command{c}})
		if err != nil {
			t.Fatal(err)
		}
		sameAsProto(t, data)
		failed = failed || gproto.Unmarshal(data, &proto.Envelope{}) != nil
	}
	if !failed {
		t.Fatal("no depth reached proto.Unmarshal's limit: the test does not test it")
	}
}

func FuzzUnmarshalEnvelope(f *testing.F) {
	for _, data := range entries(f) {
		f.Add(data)
	}
	f.Fuzz(sameAsProto)
}

// BenchmarkDecodeEntry decodes an entry of 100 publishes of 1 KiB, as a
// follower does each entry it applies.
func BenchmarkDecodeEntry(b *testing.B) {
	env := &proto.Envelope{Version: 1, StampMs: 1}
	for range 100 {
		env.Commands = append(env.Commands, publishCmd(bytes.Repeat([]byte("x"), 1024)))
	}
	data, err := gproto.Marshal(env)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		decode func([]byte, *proto.Envelope) error
	}{
		{"proto.Unmarshal", func(d []byte, e *proto.Envelope) error { return gproto.Unmarshal(d, e) }},
		{"UnmarshalEnvelope", proto.UnmarshalEnvelope},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if err := c.decode(data, &proto.Envelope{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
