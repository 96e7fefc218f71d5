package cluster_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/linksec"
	"github.com/raftmq/raftmq/internal/testpki"
	"github.com/raftmq/raftmq/proto"
)

// replySink records the replies a node's AMQP server would take; it knows
// the names in live.
type replySink struct {
	mu   sync.Mutex
	live map[string]bool
	got  []*proto.DirectReply
}

func (s *replySink) DirectReply(r *proto.DirectReply) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.live[r.GetName()] {
		return false
	}
	if !r.GetProbe() {
		s.got = append(s.got, r)
	}
	return true
}

func (s *replySink) know(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live = map[string]bool{name: true}
}

func (s *replySink) replies() []*proto.DirectReply {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*proto.DirectReply(nil), s.got...)
}

// replyCluster is a 3-node cluster with mutual TLS whose nodes have reply
// sinks, each seeing the others alive.
func replyCluster(t *testing.T, ca *testpki.CA) (*clustertest.Cluster, []*replySink) {
	t.Helper()
	sinks := []*replySink{{}, {}, {}}
	c := clustertest.New(t, 3, clustertest.WithTLS(t, ca), clustertest.WithGossipKeys(gossipKey(t)),
		clustertest.WithConfig(func(i int, cfg *cluster.Config) { cfg.Replies = sinks[i] }))
	c.WaitForLeader(clustertest.Timeout)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		for _, nd := range c.Nodes {
			for _, other := range c.Nodes {
				if m, ok := seen(nd.Node(), other.ID); !ok || m.Health != cluster.HealthAlive {
					return fmt.Errorf("%s sees %s as %+v", nd.ID, other.ID, m)
				}
			}
		}
		return nil
	})
	return c, sinks
}

func TestReply_AcrossNodes(t *testing.T) {
	ca := testpki.New(t, "raftmq test CA")
	c, sinks := replyCluster(t, ca)
	const name = "amq.rabbitmq.reply-to.some-name"
	sinks[2].know(name)
	from, to := c.Nodes[0].Node(), c.Nodes[2].ID

	// Larger than gRPC's default message limit (4 MiB): replies are as
	// large as the largest publish.
	body := bytes.Repeat([]byte("r"), 6<<20)
	ok, err := from.Reply(ctxT(t, 10*time.Second), to, &proto.DirectReply{Name: name, Body: body})
	if err != nil || !ok {
		t.Fatalf("reply to %s: %v, %v", to, ok, err)
	}
	if got := sinks[2].replies(); len(got) != 1 || !bytes.Equal(got[0].GetBody(), body) {
		t.Fatalf("%s got %d replies", to, len(got))
	}
	if ok, err := from.Reply(ctxT(t, 10*time.Second), to, &proto.DirectReply{Name: name, Probe: true}); err != nil || !ok {
		t.Fatalf("probe: %v, %v", ok, err)
	}
	// A name the node does not know is not delivered, and is no error.
	if ok, err := from.Reply(ctxT(t, 10*time.Second), to, &proto.DirectReply{Name: name + "x"}); err != nil || ok {
		t.Fatalf("reply to an unknown name: %v, %v", ok, err)
	}
	// This node's own replies go to its own sink.
	sinks[0].know(name)
	if ok, err := from.Reply(ctxT(t, 10*time.Second), c.Nodes[0].ID, &proto.DirectReply{Name: name}); err != nil || !ok || len(sinks[0].replies()) != 1 {
		t.Fatalf("reply to itself: %v, %v", ok, err)
	}
	// A node that is no member is never dialed.
	if ok, err := from.Reply(ctxT(t, 10*time.Second), "127.0.0.1:1", &proto.DirectReply{Name: name}); err == nil || ok {
		t.Fatalf("reply to a non-member: %v, %v", ok, err)
	}
	if n := len(sinks[1].replies()); n != 0 {
		t.Fatalf("a bystander got %d replies", n)
	}

	// A node that is gone loses its replies, at once.
	c.Kill(2)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if m, _ := seen(from, to); m.Health == cluster.HealthAlive {
			return fmt.Errorf("%s still alive", to)
		}
		return nil
	})
	if ok, err := from.Reply(ctxT(t, 10*time.Second), to, &proto.DirectReply{Name: name}); err == nil || ok {
		t.Fatalf("reply to a dead node: %v, %v", ok, err)
	}
}

// TestReply_OnlyNodesMayReply: Internal.Reply is behind the same check as
// Forward, so a client certificate of the cluster CA (an operator's)
// cannot put messages on clients' channels.
func TestReply_OnlyNodesMayReply(t *testing.T) {
	ca := testpki.New(t, "raftmq test CA")
	c, sinks := replyCluster(t, ca)
	const name = "amq.rabbitmq.reply-to.some-name"
	sinks[1].know(name)
	call := func(sec *linksec.TLS) error {
		cc, err := grpc.NewClient(c.Nodes[1].Config.GRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(sec.ClientConfig())))
		if err != nil {
			return err
		}
		defer cc.Close()
		_, err = proto.NewInternalClient(cc).Reply(ctxT(t, 10*time.Second), &proto.DirectReply{Name: name, Body: []byte("forged")})
		return err
	}
	if err := call(clustertest.NodeTLS(t, ca, "ops")); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("reply with an operator's certificate: %v, want PermissionDenied", err)
	}
	if n := len(sinks[1].replies()); n != 0 {
		t.Fatalf("a refused caller delivered %d replies", n)
	}
	if err := call(clustertest.NodeTLS(t, ca, c.Nodes[0].ID)); err != nil {
		t.Fatalf("reply with %s's certificate: %v", c.Nodes[0].ID, err)
	}
	if n := len(sinks[1].replies()); n != 1 {
		t.Fatalf("%d replies delivered, want 1", n)
	}
}
