package group

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// forwardService is the leader's side of the stream: ServeForward on b.
type forwardService struct {
	proto.UnimplementedInternalServer
	b *Batcher
}

func (s forwardService) Forward(stream grpc.BidiStreamingServer[proto.ForwardRequest, proto.ForwardResponse]) error {
	return ServeForward(stream, s.b, func() string { return "n1" })
}

// A follower's request goes over the stream into the leader's group
// commit and comes back with its results, also through a Submitter;
// once the leader no longer leads, it comes back as not appended.
func TestForwarder_ThroughServeForward(t *testing.T) {
	closing := make(chan struct{})
	g := startGroup(t, t.TempDir(), closing)
	var stamp int64
	var leading atomic.Bool
	leading.Store(true)
	b := NewBatcher(BatcherConfig{MaxCommands: 1024, MaxBytes: 1 << 20, MaxInflight: 4, MaxMessageSize: fsm.MaxBodySize,
		Leading: leading.Load, Stamp: func() int64 { stamp++; return stamp },
		CommandProtocol: fsm.CommandProtocol, ClusterProtocol: func() uint32 { return fsm.Protocol },
		Proposals: g.fsm.proposals, Raft: g.Raft, Logger: discardLogger(), Closing: closing})
	b.Run()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	proto.RegisterInternalServer(srv, forwardService{b: b})
	go func() { _ = srv.Serve(lis) }()
	f := NewForwarder(ForwarderConfig{MaxCommands: 1024, MaxBytes: 1 << 20, Dial: func(id, addr string) (*grpc.ClientConn, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}})
	defer func() {
		f.Close()
		srv.Stop()
		close(closing)
		b.Wait()
		_ = g.Shutdown().Error()
		g.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	vhost := &proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "v"}}}
	res, index, err := f.Submit(ctx, "n1", lis.Addr().String(), NewRequest([]*proto.Command{vhost}))
	if err != nil || len(res) != 1 || res[0].GetCode() != 0 || index == 0 || res[0].GetIndex() != index {
		t.Fatalf("forwarded: %v at %d, %v", res, index, err)
	}
	// A submitter that finds the leader elsewhere goes through the
	// forwarder, and returns once the entry is applied here.
	s := NewSubmitter(SubmitterConfig{LeaderWait: 5 * time.Second,
		Leader: func(context.Context, time.Time) (Target, error) {
			return Target{ID: "n1", Addr: lis.Addr().String()}, nil
		},
		Changed: func() <-chan struct{} { return nil }, Batcher: b, Forwarder: f,
		Applied: g.fsm.applied, State: g.fsm.state, Closing: closing})
	res2, err := s.SubmitBatch(ctx, []*proto.Command{{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "w"}}}})
	if err != nil || len(res2) != 1 || res2[0].GetCode() != 0 || res2[0].GetIndex() <= index {
		t.Fatalf("submitted: %v, %v", res2, err)
	}
	g.fsm.state.View(func(m *fsm.Machine) {
		if !m.VhostExists("w") {
			t.Error("SubmitBatch returned before its entry was applied here")
		}
	})
	leading.Store(false)
	_, _, err = f.Submit(ctx, "n1", lis.Addr().String(), NewRequest([]*proto.Command{vhost}))
	if !IsRetryable(err) || !errors.Is(err, ErrNotLeader) {
		t.Fatalf("forwarded to a node that no longer leads: %v, want a retryable ErrNotLeader", err)
	}
}
