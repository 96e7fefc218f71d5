package grpcadmin

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/api/ops/opstest"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// The delayed-message calls on a real node: a page of the earliest, a
// cancel through the log, a purge that counts, and each refusal with its
// status code.
func TestDelayedMessages_SingleNode(t *testing.T) {
	c := clustertest.New(t, 1)
	cn := c.WaitForLeader(clustertest.Timeout)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		ok := false
		cn.View(func(m *fsm.Machine) { ok = m.Initialized() })
		if !ok {
			return fmt.Errorf("defaults not applied")
		}
		return nil
	})
	client := serveAdmin(t, ops.FromCluster(cn))
	ctx := opstest.Context(t)
	str := func(s string) *proto.Value { return &proto.Value{Kind: &proto.Value_LongString{LongString: []byte(s)}} }
	cmds := []*proto.Command{
		{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{Vhost: "/", Name: "dx", Type: fsm.DelayedExchangeType, Durable: true,
			Arguments: &proto.Table{Fields: []*proto.Field{{Key: "x-delayed-type", Value: str("direct")}}}}}},
	}
	for i := int64(1); i <= 5; i++ {
		cmds = append(cmds, &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", Exchange: "dx", RoutingKey: fmt.Sprint("k", i), Body: []byte("b"),
			Properties: &proto.Properties{Headers: &proto.Table{Fields: []*proto.Field{{Key: "x-delay", Value: &proto.Value{Kind: &proto.Value_Int64{Int64: (6 - i) * 600_000}}}}}}}}})
	}
	for _, cmd := range cmds {
		if r, err := cn.Submit(ctx, cmd); err != nil || r.GetCode() != 0 {
			t.Fatalf("%v: %v %v", cmd, r, err)
		}
	}

	r, err := client.ListDelayedMessages(ctx, &proto.ListDelayedMessagesRequest{Exchange: "dx", Offset: 1, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if r.GetTotal() != 5 || len(r.GetMessages()) != 2 || r.GetMessages()[0].GetRoutingKey() != "k4" || r.GetMessages()[1].GetRoutingKey() != "k3" {
		t.Fatalf("page %v", r)
	}
	if _, err := client.CancelDelayedMessage(ctx, &proto.CancelDelayedMessageRequest{Exchange: "dx", Seq: r.GetMessages()[0].GetSeq()}); err != nil {
		t.Fatal(err)
	}
	all, err := client.ListDelayedMessages(ctx, &proto.ListDelayedMessagesRequest{})
	if err != nil || all.GetTotal() != 4 || len(all.GetMessages()) != 4 {
		t.Fatalf("after cancel %v %v", all, err)
	}
	p, err := client.PurgeDelayedMessages(ctx, &proto.PurgeDelayedMessagesRequest{Vhost: "/", Exchange: "dx"})
	if err != nil || p.GetMessageCount() != 4 {
		t.Fatalf("purge %v %v", p, err)
	}

	for _, tc := range []struct {
		what string
		call func() error
		code codes.Code
	}{
		{"list of no exchange", func() error {
			_, err := client.ListDelayedMessages(ctx, &proto.ListDelayedMessagesRequest{Exchange: "nope"})
			return err
		}, codes.NotFound},
		{"list of a direct exchange", func() error {
			_, err := client.ListDelayedMessages(ctx, &proto.ListDelayedMessagesRequest{Exchange: "amq.direct"})
			return err
		}, codes.FailedPrecondition},
		{"list beyond the bound", func() error {
			_, err := client.ListDelayedMessages(ctx, &proto.ListDelayedMessagesRequest{Exchange: "dx", Offset: ops.MaxDelayedListing, Limit: 1})
			return err
		}, codes.InvalidArgument},
		{"cancel of seq 0", func() error {
			_, err := client.CancelDelayedMessage(ctx, &proto.CancelDelayedMessageRequest{Exchange: "dx"})
			return err
		}, codes.InvalidArgument},
		{"cancel of a message gone", func() error {
			_, err := client.CancelDelayedMessage(ctx, &proto.CancelDelayedMessageRequest{Exchange: "dx", Seq: r.GetMessages()[1].GetSeq()})
			return err
		}, codes.NotFound},
		{"purge of a direct exchange", func() error {
			_, err := client.PurgeDelayedMessages(ctx, &proto.PurgeDelayedMessagesRequest{Exchange: "amq.direct"})
			return err
		}, codes.FailedPrecondition},
		{"purge of no exchange", func() error {
			_, err := client.PurgeDelayedMessages(ctx, &proto.PurgeDelayedMessagesRequest{Exchange: "nope"})
			return err
		}, codes.NotFound},
	} {
		if err := tc.call(); status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.what, err, tc.code)
		}
	}
}
