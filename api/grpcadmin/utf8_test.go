package grpcadmin

import (
	"testing"

	"github.com/raftmq/raftmq/api/ops/opstest"
	"github.com/raftmq/raftmq/proto"
)

// A queue whose name is not UTF-8 (AMQP names are any bytes) is listed
// like any other, and GetQueue finds it by those bytes.
func TestAdmin_ListsNamesThatAreNotUTF8(t *testing.T) {
	const odd = "q\xff\xfe\xc3("
	n := opstest.NewNode("n1")
	n.State.QueueList = []*proto.QueueInfo{{Vhost: "/", Name: odd, Ready: 1}, {Vhost: "/", Name: "plain"}}
	n.State.BindingList = []*proto.BindingInfo{{Vhost: "/", Source: "amq.direct", Destination: odd, RoutingKey: odd}}
	tn := startNode(t, n, nil)
	setMembers(tn)
	ctx := opstest.Context(t)
	qs, err := tn.client.ListQueues(ctx, &proto.ListQueuesRequest{})
	if err != nil {
		t.Fatalf("ListQueues: %v", err)
	}
	if len(qs.GetQueues()) != 2 || qs.GetQueues()[0].GetName() != odd {
		t.Fatalf("ListQueues: %v", qs.GetQueues())
	}
	q, err := tn.client.GetQueue(ctx, &proto.GetQueueRequest{Vhost: "/", Name: odd})
	if err != nil || q.GetName() != odd {
		t.Fatalf("GetQueue: %v %v", q, err)
	}
	bs, err := tn.client.ListBindings(ctx, &proto.ListRequest{Vhost: "/"})
	if err != nil || len(bs.GetBindings()) != 1 || bs.GetBindings()[0].GetRoutingKey() != odd {
		t.Fatalf("ListBindings: %v %v", bs, err)
	}
}
