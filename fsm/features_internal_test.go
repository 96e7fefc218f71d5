package fsm

import (
	"testing"

	"github.com/raftmq/raftmq/proto"
)

// A queue declared before the features existed may carry arguments the
// checks now refuse; it lives on in the state, and every snapshot of that
// state, including ones written in the new format, must load.
func TestRestoreKeepsQueuesWithNowRefusedArguments(t *testing.T) {
	m := New()
	m.Apply(Entry{Index: 1, Envelope: &proto.Envelope{StampMs: 1, Commands: []*proto.Command{
		{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}},
		{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "old"}}},
	}}}, DiscardSink{})
	// As the previous version left it: arguments accepted and ignored.
	m.vhosts["/"].queues["old"].args = &proto.Table{Fields: []*proto.Field{
		{Key: "x-queue-type", Value: &proto.Value{Kind: &proto.Value_LongString{LongString: []byte("stream")}}},
		{Key: "x-max-priority", Value: i64v(300)},
		{Key: "x-message-ttl", Value: i64v(5)},
	}}
	n := New()
	if err := n.RestoreBytes(snapshotBytes(t, m)); err != nil {
		t.Fatalf("restore: %v", err)
	}
	q := n.vhosts["/"].queues["old"]
	if q == nil || q.q.MaxPriority() != 0 || !q.parsed.messageTTL.Set || q.parsed.messageTTL.V != 5 {
		t.Fatalf("restored queue %+v", q)
	}
}
