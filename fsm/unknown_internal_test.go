package fsm

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/raftmq/raftmq/proto"
)

// TestHasUnknown_TableAndArrayWalkedDirectly: hasUnknown walks tables and
// arrays through their one list of messages without reflection; a
// message field added to either must be walked too.
func TestHasUnknown_TableAndArrayWalkedDirectly(t *testing.T) {
	for _, d := range []struct {
		f    *messageFields
		name string
	}{
		{messageFieldsOf((&proto.Table{}).ProtoReflect().Descriptor()), "fields"},
		{messageFieldsOf((&proto.Array{}).ProtoReflect().Descriptor()), "values"},
	} {
		if len(d.f.oneofs) != 0 || len(d.f.fields) != 1 || string(d.f.fields[0].Name()) != d.name || !d.f.fields[0].IsList() {
			t.Fatalf("message fields %v: hasUnknown walks only the list %q", d.f.fields, d.name)
		}
	}
	unknown := protowire.AppendTag(nil, 99, protowire.VarintType)
	unknown = protowire.AppendVarint(unknown, 1)
	deepValue := &proto.Value{Kind: &proto.Value_Int32{Int32: 1}}
	deepValue.ProtoReflect().SetUnknown(unknown)
	inArray := &proto.Value{Kind: &proto.Value_Array{Array: &proto.Array{Values: []*proto.Value{{Kind: &proto.Value_Int32{Int32: 2}}, deepValue}}}}
	headers := &proto.Table{Fields: []*proto.Field{{Key: "a", Value: &proto.Value{Kind: &proto.Value_Int32{Int32: 1}}}, {Key: "b", Value: inArray}}}
	c := &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: "q", Properties: &proto.Properties{Headers: headers}}}}
	if !hasUnknown(c.ProtoReflect(), 0) {
		t.Fatal("an unknown field in a value in an array in the headers was missed")
	}
	deepValue.ProtoReflect().SetUnknown(nil)
	if hasUnknown(c.ProtoReflect(), 0) {
		t.Fatal("no unknown field, yet one was found")
	}
	// Nil elements are refused by the checks after hasUnknown.
	headers.Fields = append(headers.Fields, nil)
	if err := Validate(c, Limits{}); err == nil || !strings.Contains(err.Error(), "has a nil field") {
		t.Fatalf("a nil header field: %v", err)
	}
	headers.Fields = headers.Fields[:2]
	inArray.GetArray().Values = append(inArray.GetArray().Values, nil)
	if err := Validate(c, Limits{}); err == nil || !strings.Contains(err.Error(), "has no value") {
		t.Fatalf("a nil array value: %v", err)
	}
}
