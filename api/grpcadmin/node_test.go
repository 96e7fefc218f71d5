package grpcadmin

import (
	"net"
	"testing"
	"time"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/api/ops/opstest"
	"github.com/raftmq/raftmq/proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// testNode is a Server on a loopback gRPC listener.
type testNode struct {
	node   *opstest.Node
	conns  *opstest.Conns
	addr   string
	client proto.AdminClient
}

// startNode serves a Server for node on loopback and returns a
// client of it.
func startNode(t *testing.T, node *opstest.Node, conns *opstest.Conns) *testNode {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pool := ops.NewPeerPool()
	t.Cleanup(func() { _ = pool.Close() })
	srv := grpc.NewServer()
	deps := ops.Deps{Node: node, Peers: pool, LeaderWait: 2 * time.Second}
	if conns != nil {
		deps.Conns = conns
	}
	proto.RegisterAdminServer(srv, New(ops.New(deps)))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return &testNode{node: node, conns: conns, addr: lis.Addr().String(), client: proto.NewAdminClient(cc)}
}

// setMembers gives every node the same member list.
func setMembers(nodes ...*testNode) {
	var ms []*proto.NodeStatus
	for _, n := range nodes {
		ms = append(ms, &proto.NodeStatus{Id: n.node.ID, GrpcAddr: n.addr, Health: "alive", Suffrage: "voter"})
	}
	for _, n := range nodes {
		n.node.Mu.Lock()
		n.node.MemberList = ms
		n.node.Mu.Unlock()
	}
}
