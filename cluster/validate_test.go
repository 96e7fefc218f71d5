package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// internalConn opens a client of the internal gRPC service of the node
// at addr as a raw client that speaks the protocol would: the one place
// these tests choose how to reach Forward.
func internalConn(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// dialInternal is internalConn to node n, closed at the end of the test.
func dialInternal(tb testing.TB, c *clustertest.Cluster, n *cluster.Node) *grpc.ClientConn {
	tb.Helper()
	cc, err := internalConn(c.Nodes[c.Index(n.NodeID())].Config.GRPCAddr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// forwardOnce sends one ForwardRequest on a new stream and returns the
// answer.
func forwardOnce(tb testing.TB, cc *grpc.ClientConn, req *proto.ForwardRequest) *proto.ForwardResponse {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := proto.NewInternalClient(cc).Forward(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	if err := stream.Send(req); err != nil {
		tb.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		tb.Fatalf("forward: %v", err)
	}
	if resp.GetId() != req.GetId() {
		tb.Fatalf("answer to request %d, sent %d", resp.GetId(), req.GetId())
	}
	return resp
}

// unknownKind is a command of a kind no version of this binary knows.
func unknownKind() *proto.Command {
	c := &proto.Command{}
	c.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.BytesType), 0))
	return c
}

// healthy checks that every node still serves: a command submitted on
// each commits and applies there, no node stopped, and the replicas are
// identical.
func healthy(t testing.TB, c *clustertest.Cluster) {
	t.Helper()
	for _, n := range c.Live() {
		select {
		case <-n.Failed():
			t.Fatalf("%s stopped: %v", n.NodeID(), n.Err())
		default:
		}
		mustSubmit(t, n, tick())
	}
	c.AssertSameDigest(t)
}

// TestForward_InvalidCommandsFailAlone sends the leader, as a raw client,
// one request holding an empty command, a command of an unknown kind and
// a valid one: the invalid ones are refused, the valid one commits, and
// the cluster goes on.
func TestForward_InvalidCommandsFailAlone(t *testing.T) {
	c := clustertest.New(t, 3)
	l := c.WaitForLeader(clustertest.Timeout)
	cc := dialInternal(t, c, l)

	resp := forwardOnce(t, cc, &proto.ForwardRequest{Id: 7, Commands: []*proto.Command{{}, unknownKind(), vhostPut("fwd")}})
	if resp.GetError() != proto.ForwardError_FORWARD_ERROR_NONE || len(resp.GetResults()) != 3 {
		t.Fatalf("response %v", resp)
	}
	res := resp.GetResults()
	if res[0].GetCode() != 541 || !strings.Contains(res[0].GetText(), "no kind") {
		t.Fatalf("empty command: %v", res[0])
	}
	if res[1].GetCode() != 541 || !strings.Contains(res[1].GetText(), "unknown kind") {
		t.Fatalf("unknown kind: %v", res[1])
	}
	if res[2].GetCode() != 0 || res[2].GetIndex() == 0 || resp.GetIndex() != res[2].GetIndex() {
		t.Fatalf("valid command: %v (entry %d)", res[2], resp.GetIndex())
	}
	c.WaitApplied(resp.GetIndex())
	for _, n := range c.Live() {
		var ok bool
		n.View(func(m *fsm.Machine) { ok = m.VhostExists("fwd") })
		if !ok {
			t.Fatalf("%s lacks the vhost of the valid command", n.NodeID())
		}
	}

	// A request of invalid commands only appends nothing; one without
	// commands is answered empty.
	before := l.Stats().LastLogIndex
	resp = forwardOnce(t, cc, &proto.ForwardRequest{Id: 8, Commands: []*proto.Command{{}, {Cmd: &proto.Command_Settle{Settle: &proto.Settle{}}}}})
	if resp.GetError() != proto.ForwardError_FORWARD_ERROR_NONE || len(resp.GetResults()) != 2 || resp.GetIndex() != 0 {
		t.Fatalf("response %v", resp)
	}
	if r := resp.GetResults()[1]; r.GetCode() != 541 || !strings.Contains(r.GetText(), "channel is missing") {
		t.Fatalf("settle without channel: %v", r)
	}
	resp = forwardOnce(t, cc, &proto.ForwardRequest{Id: 9})
	if resp.GetError() != proto.ForwardError_FORWARD_ERROR_NONE || len(resp.GetResults()) != 0 {
		t.Fatalf("empty request: %v", resp)
	}
	if after := l.Stats().LastLogIndex; after != before {
		t.Fatalf("requests of no valid command appended entries %d..%d", before+1, after)
	}
	healthy(t, c)
}

// TestForward_FollowerCallerGetsTheRefusal: a follower forwards its
// callers' commands; the caller whose command is invalid gets the
// refusal as its result (not an unknown outcome), and a bystander
// submitting on the same follower meanwhile loses nothing. A leader
// change (a loaded machine starves heartbeats) may leave a submission's
// outcome unknown: it is counted as such, and the queue then holds
// between the known and the known plus the unknown.
func TestForward_FollowerCallerGetsTheRefusal(t *testing.T) {
	const maxBody = 1 << 10
	c := clustertest.New(t, 3, clustertest.WithConfig(func(_ int, cfg *cluster.Config) { cfg.MaxMessageSize = maxBody }))
	// The declare needs "/": before the defaults entry it is refused, and
	// every publish after it is unroutable.
	waitDefaults(t, c, c.WaitForLeader(clustertest.Timeout))
	f := c.Followers()[0]
	requireFSM(t, mustSubmit(t, f, queueDeclare("/", "q")))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	bystander := make(chan error, 1)
	published, unknown := 0, 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			res, err := f.SubmitBatch(context.Background(), []*proto.Command{publish("/", "q", "b"), tick()})
			if errors.Is(err, cluster.ErrOutcomeUnknown) {
				unknown++
				continue
			}
			if err == nil && (res[0].GetCode() != 0 || res[1].GetCode() != 0) {
				err = fmt.Errorf("results %v", res)
			}
			if err != nil {
				bystander <- err
				return
			}
			published++
		}
	}()

	big := publish("/", "q", strings.Repeat("x", maxBody+1))
	valid, unknownValid := 0, 0
	for i := range 50 {
		res, err := f.SubmitBatch(ctxT(t, 10*time.Second), []*proto.Command{{}, big, publish("/", "q", strings.Repeat("x", maxBody))})
		if errors.Is(err, cluster.ErrOutcomeUnknown) {
			unknownValid++
			continue
		}
		if err != nil {
			t.Fatalf("submission %d with invalid commands: %v", i, err)
		}
		if res[0].GetCode() != 541 || res[1].GetCode() != 406 || !strings.Contains(res[1].GetText(), "message size 1025 is larger than configured max size 1024") {
			t.Fatalf("submission %d: refusals %v, %v", i, res[0], res[1])
		}
		if res[2].GetCode() != 0 || res[2].GetIndex() == 0 {
			t.Fatalf("submission %d: the valid publish %v", i, res[2])
		}
		valid++
	}
	if valid < 40 {
		t.Fatalf("%d of 50 submissions with invalid commands had an outcome", valid)
	}
	cancel()
	wg.Wait()
	select {
	case err := <-bystander:
		t.Fatalf("bystander: %v", err)
	default:
	}
	if published == 0 {
		t.Fatal("the bystander submitted nothing while the invalid commands were refused")
	}
	var ready uint64
	f.View(func(m *fsm.Machine) {
		if qi, ok := m.Queue("/", "q"); ok {
			ready = qi.GetReady()
		}
	})
	if least := uint64(published + valid); ready < least || ready > least+uint64(unknown+unknownValid) {
		t.Fatalf("queue holds %d messages, want %d (bystander %d + %d valid) and at most %d more of unknown outcome",
			ready, least, published, valid, unknown+unknownValid)
	}
	healthy(t, c)
}
