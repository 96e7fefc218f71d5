package group

import (
	"bytes"
	"testing"

	"github.com/raftmq/raftmq/proto"
	gproto "google.golang.org/protobuf/proto"
)

func publish(body []byte) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: "q", Body: body,
		Channel: &proto.ChannelRef{Node: "n1", Connection: "c", Channel: 1}}}}
}

// An entry encoded with the sizes NewRequest measured decodes to its
// commands, also when one was changed after it was measured.
func TestMarshalEntry_SizesMeasuredBefore(t *testing.T) {
	for _, change := range []struct {
		name string
		do   func(cmds []*proto.Command)
	}{
		{"unchanged", func([]*proto.Command) {}},
		{"a body grew", func(cmds []*proto.Command) { cmds[1].GetPublish().Body = bytes.Repeat([]byte("y"), 300) }},
		{"a nested field shrank", func(cmds []*proto.Command) { cmds[0].GetPublish().Channel.Connection = "" }},
	} {
		t.Run(change.name, func(t *testing.T) {
			cmds := []*proto.Command{publish([]byte("one")), publish(bytes.Repeat([]byte("x"), 200))}
			NewRequest(cmds)
			change.do(cmds)
			env := &proto.Envelope{Version: EnvelopeVersion, StampMs: 42, Commands: cmds}
			data, err := marshalEntry(env)
			if err != nil {
				t.Fatal(err)
			}
			got := &proto.Envelope{}
			if err := gproto.Unmarshal(data, got); err != nil {
				t.Fatalf("the entry does not decode: %v", err)
			}
			if !gproto.Equal(got, env) {
				t.Fatalf("decoded %v, want %v", got, env)
			}
		})
	}
}
