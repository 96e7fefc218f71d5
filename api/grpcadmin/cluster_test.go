package grpcadmin

import (
	"encoding/hex"
	"fmt"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/api/ops/opstest"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// serveAdmin serves the Admin service of node on loopback and returns a
// client of it.
func serveAdmin(t *testing.T, node ops.Node) proto.AdminClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	proto.RegisterAdminServer(srv, New(ops.New(ops.Deps{Node: node})))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return proto.NewAdminClient(cc)
}

func TestFromCluster_SingleNode(t *testing.T) {
	c := clustertest.New(t, 1)
	cn := c.WaitForLeader(clustertest.Timeout)
	node := ops.FromCluster(cn)
	client := serveAdmin(t, node)
	ctx := opstest.Context(t)

	st, err := client.ClusterStatus(ctx, &proto.ClusterStatusRequest{Consistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetNodeId() != cn.NodeID() || st.GetLeaderId() != cn.NodeID() || st.GetRaftState() != "Leader" ||
		len(st.GetNodes()) != 1 || st.GetNodes()[0].GetSuffrage() != "voter" || !st.GetNodes()[0].GetLeader() {
		t.Fatalf("ClusterStatus %v", st)
	}

	// The new leader still applies its first entries (the protocol level,
	// the default vhost): compare once the state read before and after
	// the call is the same.
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		var before uint64
		cn.View(func(m *fsm.Machine) { before = m.AppliedIndex() })
		d, err := client.Digest(ctx, &proto.DigestRequest{})
		if err != nil {
			return err
		}
		var want [32]byte
		var applied uint64
		cn.View(func(m *fsm.Machine) { want, applied = m.Digest(), m.AppliedIndex() })
		if before != applied {
			return fmt.Errorf("applied %d, then %d", before, applied)
		}
		if d.GetDigest() != hex.EncodeToString(want[:]) || d.GetAppliedIndex() != applied {
			t.Fatalf("Digest %v, want %x at %d", d, want, applied)
		}
		return nil
	})

	if _, err := client.ListQueues(ctx, &proto.ListQueuesRequest{Consistent: true}); err != nil {
		t.Fatalf("consistent read on the leader: %v", err)
	}
}
