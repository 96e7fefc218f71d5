package fsm_test

import (
	"testing"

	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

// A queue counts its persistent messages, ready and unacknowledged, and
// shows the timestamp of the message at its head, as RabbitMQ's
// messages_persistent and head_message_timestamp.
func TestMachine_PersistentAndHeadTimestamp(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 2, declare("q", table("x-message-ttl", i64(1000))))
	persistent := &proto.Properties{DeliveryMode: ptr(uint32(2)), Timestamp: ptr(int64(1700000000))}
	fsmtest.One(t, m, 3, publish("", "q", "a", persistent))
	fsmtest.One(t, m, 3, publish("", "q", "b", &proto.Properties{DeliveryMode: ptr(uint32(1)), Timestamp: ptr(int64(1700000001))}))
	fsmtest.One(t, m, 3, publish("", "q", "c", persistent))
	info := func() *proto.QueueInfo {
		qi, ok := m.Queue("/", "q")
		if !ok {
			t.Fatal("no queue")
		}
		return qi
	}
	if qi := info(); qi.GetMessagesPersistent() != 2 || qi.GetHeadMessageTimestamp() != 1700000000 {
		t.Fatalf("persistent %d, head timestamp %d", qi.GetMessagesPersistent(), qi.GetHeadMessageTimestamp())
	}
	// a goes out unacknowledged: still counted; b is at the head.
	fsmtest.One(t, m, 4, get("q", false))
	if qi := info(); qi.GetMessagesPersistent() != 2 || qi.GetHeadMessageTimestamp() != 1700000001 {
		t.Fatalf("after a get: persistent %d, head timestamp %d", qi.GetMessagesPersistent(), qi.GetHeadMessageTimestamp())
	}
	fsmtest.One(t, m, 5, settle(ch1, 1, false))
	// b and c expire: nothing is left.
	fsmtest.One(t, m, 2000, expire("q"))
	if qi := info(); qi.GetMessagesPersistent() != 0 || qi.GetHeadMessageTimestamp() != 0 {
		t.Fatalf("empty: persistent %d, head timestamp %d", qi.GetMessagesPersistent(), qi.GetHeadMessageTimestamp())
	}
}
