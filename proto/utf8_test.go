package proto

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	gproto "google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// notUTF8 is what an AMQP client may put in a short string.
const notUTF8 = "a\xff\xfe\xc3(\x80z"

// A publish whose short strings are not UTF-8 goes through gRPC (a
// follower forwards it) and comes back byte for byte.
func TestUTF8_PublishRoundTripsThroughTheGRPCCodec(t *testing.T) {
	mid, rk := notUTF8+"-id", notUTF8+"-key"
	in := &ForwardRequest{Id: 7, Commands: []*Command{{Cmd: &Command_Publish{Publish: &Publish{
		Vhost: "/", Exchange: notUTF8, RoutingKey: rk,
		Properties: &Properties{
			MessageId: &mid,
			Headers:   &Table{Fields: []*Field{{Key: notUTF8, Value: &Value{Kind: &Value_ShortString{ShortString: notUTF8}}}}},
		},
		Body: []byte("body"),
	}}}}}
	codec := encoding.GetCodecV2(grpcproto.Name)
	data, err := codec.Marshal(in)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	out := &ForwardRequest{}
	if err := codec.Unmarshal(data, out); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	p := out.GetCommands()[0].GetPublish()
	got := []string{p.GetExchange(), p.GetRoutingKey(), p.GetProperties().GetMessageId(),
		p.GetProperties().GetHeaders().GetFields()[0].GetKey(),
		p.GetProperties().GetHeaders().GetFields()[0].GetValue().GetShortString()}
	want := []string{notUTF8, rk, mid, notUTF8, notUTF8}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("field %d: %q, want %q", i, got[i], want[i])
		}
	}
	if !gproto.Equal(in, out) {
		t.Fatal("the request changed on its way")
	}
}

// Every string field of every message, singular, repeated or in a oneof,
// takes bytes that are not UTF-8: a field added later with validation on
// fails here.
func TestUTF8_EveryStringFieldCarriesAnyBytes(t *testing.T) {
	files := []protoreflect.FileDescriptor{File_command_proto, File_internal_proto, File_admin_proto}
	n := 0
	for _, fd := range files {
		var walk func(ms protoreflect.MessageDescriptors)
		walk = func(ms protoreflect.MessageDescriptors) {
			for i := 0; i < ms.Len(); i++ {
				md := ms.Get(i)
				walk(md.Messages())
				fields := md.Fields()
				for j := 0; j < fields.Len(); j++ {
					f := fields.Get(j)
					if f.Kind() != protoreflect.StringKind || f.IsMap() {
						continue
					}
					n++
					checkStringField(t, md, f)
				}
			}
		}
		walk(fd.Messages())
	}
	if n < 50 {
		t.Fatalf("only %d string fields found", n)
	}
}

func checkStringField(t *testing.T, md protoreflect.MessageDescriptor, f protoreflect.FieldDescriptor) {
	t.Helper()
	m := dynamicpb.NewMessage(md)
	v := protoreflect.ValueOfString(notUTF8)
	if f.IsList() {
		m.Mutable(f).List().Append(v)
	} else {
		m.Set(f, v)
	}
	data, err := gproto.Marshal(m)
	if err != nil {
		t.Errorf("%s: marshal: %v", f.FullName(), err)
		return
	}
	back := dynamicpb.NewMessage(md)
	if err := gproto.Unmarshal(data, back); err != nil {
		t.Errorf("%s: unmarshal: %v", f.FullName(), err)
		return
	}
	var got string
	if f.IsList() {
		got = back.Get(f).List().Get(0).String()
	} else {
		got = back.Get(f).String()
	}
	if !bytes.Equal([]byte(got), []byte(notUTF8)) {
		t.Errorf("%s: %q came back as %q", f.FullName(), notUTF8, got)
	}
}
