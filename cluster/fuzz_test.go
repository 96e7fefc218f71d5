package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	"google.golang.org/grpc"
	gproto "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/proto"
)

// FuzzForward sends arbitrary ForwardRequests to the leader of a
// three-node cluster, as a raw client would, and checks after each that
// no node stopped or panicked (a panic ends the process), that the
// cluster still commits a command submitted on every node, and that the
// replicas are identical. The cluster is built once per fuzzing process.
func FuzzForward(f *testing.F) {
	seed := func(cmds ...*proto.Command) {
		b, err := gproto.Marshal(&proto.ForwardRequest{Id: 1, Commands: cmds})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(&proto.Command{})
	seed(unknownKind())
	seed(&proto.Command{}, vhostPut("v"), unknownKind())
	oneof := (&proto.Command{}).ProtoReflect().Descriptor().Oneofs().ByName("cmd").Fields()
	for i := 0; i < oneof.Len(); i++ {
		c := &proto.Command{}
		m := c.ProtoReflect()
		fd := oneof.Get(i)
		m.Set(fd, protoreflect.ValueOfMessage(m.NewField(fd).Message()))
		seed(c)
	}
	seed(queueDeclare("/", "q"), publish("/", "q", "body"),
		&proto.Command{Cmd: &proto.Command_Consume{Consume: &proto.Consume{Vhost: "/", Queue: "q",
			Consumer: &proto.ConsumerRef{Channel: &proto.ChannelRef{Node: "node1", Connection: "c", Channel: 1}, Tag: "t"}}}},
		&proto.Command{Cmd: &proto.Command_Settle{Settle: &proto.Settle{
			Channel: &proto.ChannelRef{Node: "node1", Connection: "c", Channel: 1}, DeliveryTag: 1}}})

	c := clustertest.New(f, 3)
	c.WaitForLeader(clustertest.Timeout)
	// One connection per node for the whole run; c's helpers that fail
	// through f cannot be called inside the fuzz function.
	conns := map[string]*grpc.ClientConn{}
	for _, nd := range c.Nodes {
		cc, err := internalConn(nd.Config.GRPCAddr)
		if err != nil {
			f.Fatal(err)
		}
		conns[nd.ID] = cc
	}
	f.Cleanup(func() {
		for _, cc := range conns {
			_ = cc.Close()
		}
	})
	var id uint64
	f.Fuzz(func(t *testing.T, b []byte) {
		req := &proto.ForwardRequest{}
		if gproto.Unmarshal(b, req) != nil {
			return
		}
		var leader string
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			for _, n := range c.Live() {
				if n.IsLeader() {
					leader = n.NodeID()
					return nil
				}
			}
			return errors.New("no leader")
		})
		cc := conns[leader]
		id++
		req.Id = id // the fuzzer's own id would not tell answers apart
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		stream, err := proto.NewInternalClient(cc).Forward(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(req); err != nil {
			t.Fatalf("send: %v", err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("the leader broke the stream: %v", err)
		}
		if resp.GetError() == proto.ForwardError_FORWARD_ERROR_NONE && len(resp.GetResults()) != len(req.GetCommands()) {
			t.Fatalf("%d results for %d commands", len(resp.GetResults()), len(req.GetCommands()))
		}
		healthy(t, c)
	})
}
