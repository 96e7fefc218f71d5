package fsm

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

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

// TestMessageKindHasUnknown_WalksEveryMessageField: the direct walk of the
// per-message kinds descends into every message field their types have,
// so a message field added to one of them fails here until the walk
// takes it too.
func TestMessageKindHasUnknown_WalksEveryMessageField(t *testing.T) {
	for _, d := range []struct {
		m      protoreflect.ProtoMessage
		fields []string
		oneofs []string
	}{
		{&proto.Command{}, nil, []string{"cmd"}},
		{&proto.Publish{}, []string{"properties", "channel"}, nil},
		{&proto.Enqueue{}, []string{"properties", "channel"}, nil},
		{&proto.Settle{}, []string{"channel"}, nil},
		{&proto.Properties{}, []string{"headers"}, nil},
		{&proto.ChannelRef{}, nil, nil},
		{&proto.Field{}, []string{"value"}, nil},
		{&proto.Value{}, nil, []string{"kind"}},
		{&proto.Decimal{}, nil, nil},
	} {
		f := messageFieldsOf(d.m.ProtoReflect().Descriptor())
		var fields, oneofs []string
		for _, fd := range f.fields {
			fields = append(fields, string(fd.Name()))
		}
		for _, od := range f.oneofs {
			oneofs = append(oneofs, string(od.Name()))
		}
		for _, od := range f.oneofs {
			if od.Name() == "kind" {
				// A value's kind: hasUnknown walks its table, array
				// and decimal members.
				var members []string
				for i := 0; i < od.Fields().Len(); i++ {
					if fd := od.Fields().Get(i); isMessage(fd) {
						members = append(members, string(fd.Name()))
					}
				}
				if !slices.Equal(members, []string{"decimal", "table", "array"}) {
					t.Errorf("a value's message kinds are %v, hasUnknown walks decimal, table and array", members)
				}
			}
		}
		if !slices.Equal(fields, d.fields) || !slices.Equal(oneofs, d.oneofs) {
			t.Errorf("%s: message fields %v and oneofs %v, the walk takes %v and %v",
				d.m.ProtoReflect().Descriptor().Name(), fields, oneofs, d.fields, d.oneofs)
		}
	}
}

// TestMessageKindHasUnknown_AgreesWithTheReflectiveWalk: an unknown field
// at each level of a publish, an enqueue and an ack is found by the direct
// walk as by the reflective one, and Validate refuses the command.
func TestMessageKindHasUnknown_AgreesWithTheReflectiveWalk(t *testing.T) {
	unknown := protowire.AppendTag(nil, 99, protowire.VarintType)
	unknown = protowire.AppendVarint(unknown, 1)
	plant := func(m protoreflect.ProtoMessage) { m.ProtoReflect().SetUnknown(unknown) }
	ref := func() *proto.ChannelRef { return &proto.ChannelRef{Node: "n1", Connection: "c1", Channel: 1} }
	props := func() *proto.Properties {
		return &proto.Properties{DeliveryMode: new(uint32(2)), Headers: &proto.Table{Fields: []*proto.Field{
			{Key: "a", Value: &proto.Value{Kind: &proto.Value_Int32{Int32: 1}}},
			{Key: "d", Value: &proto.Value{Kind: &proto.Value_Decimal{Decimal: &proto.Decimal{Scale: 2, Value: 150}}}},
			{Key: "t", Value: &proto.Value{Kind: &proto.Value_Table{Table: &proto.Table{Fields: []*proto.Field{
				{Key: "x", Value: &proto.Value{Kind: &proto.Value_Bool{Bool: true}}}}}}}},
		}}}
	}
	publish := func() *proto.Command {
		return &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: "q", Properties: props(), Channel: ref()}}}
	}
	enqueue := func() *proto.Command {
		return &proto.Command{Cmd: &proto.Command_Enqueue{Enqueue: &proto.Enqueue{Vhost: "/", Queues: []string{"q"}, Properties: props(), Channel: ref()}}}
	}
	settle := func() *proto.Command {
		return &proto.Command{Cmd: &proto.Command_Settle{Settle: &proto.Settle{Channel: ref(), DeliveryTag: 1}}}
	}
	// Each message of a publish or an enqueue that may hold an unknown
	// field, as seen from the command and its body (the publish or the
	// enqueue).
	type body interface {
		protoreflect.ProtoMessage
		GetChannel() *proto.ChannelRef
		GetProperties() *proto.Properties
	}
	bodyOf := func(c *proto.Command) body {
		if p := c.GetPublish(); p != nil {
			return p
		}
		return c.GetEnqueue()
	}
	header := func(c *proto.Command, i int) *proto.Field {
		return bodyOf(c).GetProperties().GetHeaders().GetFields()[i]
	}
	levels := map[string]func(c *proto.Command) protoreflect.ProtoMessage{
		"command":      func(c *proto.Command) protoreflect.ProtoMessage { return c },
		"itself":       func(c *proto.Command) protoreflect.ProtoMessage { return bodyOf(c) },
		"channel":      func(c *proto.Command) protoreflect.ProtoMessage { return bodyOf(c).GetChannel() },
		"properties":   func(c *proto.Command) protoreflect.ProtoMessage { return bodyOf(c).GetProperties() },
		"headers":      func(c *proto.Command) protoreflect.ProtoMessage { return bodyOf(c).GetProperties().GetHeaders() },
		"header":       func(c *proto.Command) protoreflect.ProtoMessage { return header(c, 0) },
		"header value": func(c *proto.Command) protoreflect.ProtoMessage { return header(c, 0).GetValue() },
		"decimal":      func(c *proto.Command) protoreflect.ProtoMessage { return header(c, 1).GetValue().GetDecimal() },
		"nested table": func(c *proto.Command) protoreflect.ProtoMessage { return header(c, 2).GetValue().GetTable() },
		"nested field": func(c *proto.Command) protoreflect.ProtoMessage {
			return header(c, 2).GetValue().GetTable().GetFields()[0]
		},
		"nested value": func(c *proto.Command) protoreflect.ProtoMessage {
			return header(c, 2).GetValue().GetTable().GetFields()[0].GetValue()
		},
	}
	settleLevels := map[string]func(c *proto.Command) protoreflect.ProtoMessage{
		"command": func(c *proto.Command) protoreflect.ProtoMessage { return c },
		"itself":  func(c *proto.Command) protoreflect.ProtoMessage { return c.GetSettle() },
		"channel": func(c *proto.Command) protoreflect.ProtoMessage { return c.GetSettle().GetChannel() },
	}
	cases := map[string]*proto.Command{}
	for kind, k := range map[string]struct {
		make   func() *proto.Command
		levels map[string]func(c *proto.Command) protoreflect.ProtoMessage
	}{"publish": {publish, levels}, "enqueue": {enqueue, levels}, "settle": {settle, settleLevels}} {
		for level, at := range k.levels {
			c := k.make()
			plant(at(c))
			cases[kind+" "+level] = c
		}
	}
	for name, c := range cases {
		direct, walked := messageKindHasUnknown(c)
		if !walked || !direct || !hasUnknown(c.ProtoReflect(), 0) {
			t.Errorf("%s: direct walk %v (walked %v), reflective walk %v; want both to find it", name, direct, walked, hasUnknown(c.ProtoReflect(), 0))
		}
		if err := Validate(c, Limits{}); err == nil || !strings.Contains(err.Error(), "fields this node does not know") {
			t.Errorf("%s: Validate %v", name, err)
		}
	}
	for name, c := range map[string]*proto.Command{"publish": publish(), "enqueue": enqueue(), "settle": settle()} {
		if direct, walked := messageKindHasUnknown(c); !walked || direct || hasUnknown(c.ProtoReflect(), 0) {
			t.Errorf("clean %s: direct walk %v (walked %v), reflective walk %v", name, direct, walked, hasUnknown(c.ProtoReflect(), 0))
		}
	}
	if _, walked := messageKindHasUnknown(&proto.Command{Cmd: &proto.Command_Get{Get: &proto.Get{}}}); walked {
		t.Error("a get was walked directly; only the per-message kinds are")
	}
}
