package group

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// forwardService is the leader's side of the stream: ServeForward on b.
type forwardService struct {
	proto.UnimplementedInternalServer
	b *Batcher
}

func (s forwardService) Forward(stream grpc.BidiStreamingServer[proto.ForwardRequest, proto.ForwardResponse]) error {
	return ServeForward(stream, s.b, func() string { return "n1" }, nil)
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

// groupService serves streams as a node of one queue group does: the
// group a stream names is seen, and a stream for another group has its
// requests refused as not appended.
type groupService struct {
	proto.UnimplementedInternalServer
	seen chan string
}

func (s groupService) Forward(stream grpc.BidiStreamingServer[proto.ForwardRequest, proto.ForwardResponse]) error {
	id := ForwardGroup(stream.Context())
	s.seen <- id
	return RefuseForward(stream, "no group "+id)
}

// A forwarder names its group on the stream (none for the default
// group), and a refusal for want of the group comes back retryable.
func TestForwarder_NamesItsGroup(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 4)
	srv := grpc.NewServer()
	proto.RegisterInternalServer(srv, groupService{seen: seen})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	dial := func(id, addr string) (*grpc.ClientConn, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	for _, id := range []string{"q7", DefaultID} {
		f := NewForwarder(ForwarderConfig{MaxCommands: 1024, MaxBytes: 1 << 20, Dial: dial, Group: id})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		tick := &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}
		_, _, err := f.Submit(ctx, "n1", lis.Addr().String(), NewRequest([]*proto.Command{tick}))
		cancel()
		f.Close()
		if !IsRetryable(err) || !errors.Is(err, ErrNotLeader) {
			t.Fatalf("group %q: %v, want not appended", id, err)
		}
		if got := <-seen; got != id {
			t.Fatalf("the stream named group %q, want %q", got, id)
		}
	}
}

// A follower's refusal names the leader it knows of: the error the
// forwarder returns carries it (LeaderHint) and is still a retryable
// ErrNotLeader, and a submitter that hears of it (Refused) goes straight
// to that leader; with no Applied and no State (a node outside the
// group) it returns at commit and leaves the commands as they are.
func TestForwarder_RefusalNamesTheLeader(t *testing.T) {
	closing := make(chan struct{})
	g := startGroup(t, t.TempDir(), closing)
	var stamp int64
	newBatcher := func(leading bool) *Batcher {
		return NewBatcher(BatcherConfig{MaxCommands: 1024, MaxBytes: 1 << 20, MaxInflight: 4, MaxMessageSize: fsm.MaxBodySize,
			Leading: func() bool { return leading }, Stamp: func() int64 { stamp++; return stamp },
			CommandProtocol: fsm.CommandProtocol, ClusterProtocol: func() uint32 { return fsm.Protocol },
			Proposals: g.fsm.proposals, Raft: g.Raft, Logger: discardLogger(), Closing: closing})
	}
	lb := newBatcher(true)
	lb.Run()
	serve := func(b *Batcher, leader string) (string, *grpc.Server) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		proto.RegisterInternalServer(srv, leaderService{b: b, leader: leader})
		go func() { _ = srv.Serve(lis) }()
		return lis.Addr().String(), srv
	}
	leaderAddr, lsrv := serve(lb, "n1")
	followerAddr, fsrv := serve(newBatcher(false), "n1")
	f := NewForwarder(ForwarderConfig{MaxCommands: 1024, MaxBytes: 1 << 20, Group: "q1", Dial: func(id, addr string) (*grpc.ClientConn, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}})
	defer func() {
		f.Close()
		lsrv.Stop()
		fsrv.Stop()
		close(closing)
		lb.Wait()
		_ = g.Shutdown().Error()
		g.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tick := &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}
	_, _, err := f.Submit(ctx, "n2", followerAddr, NewRequest([]*proto.Command{tick}))
	if !IsRetryable(err) || !errors.Is(err, ErrNotLeader) || LeaderHint(err) != "n1" {
		t.Fatalf("refused by a follower: %v (hint %q), want a retryable ErrNotLeader naming n1", err, LeaderHint(err))
	}
	if h := LeaderHint(NotAppendedf(ErrNotLeader, "x")); h != "" {
		t.Fatalf("a refusal naming no leader has hint %q", h)
	}

	addrs := map[string]string{"n1": leaderAddr, "n2": followerAddr}
	var tried []string
	hint := ""
	s := NewSubmitter(SubmitterConfig{LeaderWait: 5 * time.Second,
		Leader: func(context.Context, time.Time) (Target, error) {
			id := "n2" // the member first in turn
			if hint != "" {
				id = hint
			}
			tried = append(tried, id)
			return Target{ID: id, Addr: addrs[id]}, nil
		},
		Refused: func(_ Target, err error) { hint = LeaderHint(err) },
		Changed: func() <-chan struct{} { return nil }, Forwarder: f, Closing: closing})
	reject := &proto.Command{Cmd: &proto.Command_Requeue{Requeue: &proto.Requeue{Failed: true}}}
	s.gateFailed([]*proto.Command{reject})
	if !reject.GetRequeue().GetFailed() {
		t.Fatal("a submitter with no state cleared Requeue.failed")
	}
	res, err := s.SubmitBatch(ctx, []*proto.Command{{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "v"}}}})
	if err != nil || len(res) != 1 || res[0].GetCode() != 0 || res[0].GetIndex() == 0 {
		t.Fatalf("submitted: %v, %v", res, err)
	}
	if len(tried) != 2 || tried[0] != "n2" || tried[1] != "n1" {
		t.Fatalf("tried %v, want n2 then the leader it named, n1", tried)
	}
}

// leaderService serves streams with ServeForward on b, naming leader as
// the group's leader in a refusal.
type leaderService struct {
	proto.UnimplementedInternalServer
	b      *Batcher
	leader string
}

func (s leaderService) Forward(stream grpc.BidiStreamingServer[proto.ForwardRequest, proto.ForwardResponse]) error {
	return ServeForward(stream, s.b, func() string { return s.leader }, nil)
}

// forwardTo serves svc on a loopback port until the test ends, and
// returns its address and a forwarder that dials it.
func forwardTo(t *testing.T, svc proto.InternalServer) (string, *Forwarder) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	proto.RegisterInternalServer(srv, svc)
	go func() { _ = srv.Serve(lis) }()
	f := NewForwarder(ForwarderConfig{MaxCommands: 1024, MaxBytes: 1 << 20, Dial: func(id, addr string) (*grpc.ClientConn, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}})
	t.Cleanup(func() {
		f.Close()
		srv.Stop()
	})
	return lis.Addr().String(), f
}

// silentService takes a follower's requests and never answers: a leader
// that froze with the stream open.
type silentService struct {
	proto.UnimplementedInternalServer
	got chan struct{}
}

func (s silentService) Forward(stream grpc.BidiStreamingServer[proto.ForwardRequest, proto.ForwardResponse]) error {
	for {
		if _, err := stream.Recv(); err != nil {
			return nil
		}
		s.got <- struct{}{}
	}
}

// A node that runs no raft of the group hears of no election: when the
// cluster finds the leader silent, LeaderSuspect ends what is in flight
// to it as outcome unknown instead of leaving it to the stream's
// keepalive; a suspicion of another node changes nothing.
func TestForwarder_ASuspectLeadersRequestsEndAsOutcomeUnknown(t *testing.T) {
	svc := silentService{got: make(chan struct{}, 1)}
	addr, f := forwardTo(t, svc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, _, err := f.Submit(ctx, "n1", addr, NewRequest([]*proto.Command{{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}}))
		done <- err
	}()
	select {
	case <-svc.got:
	case <-ctx.Done():
		t.Fatal("the request never reached the leader")
	}
	f.LeaderSuspect("n2")
	select {
	case err := <-done:
		t.Fatalf("a suspicion of another node ended the request: %v", err)
	case <-time.After(2 * oldLeaderGrace):
	}
	f.LeaderSuspect("n1")
	select {
	case err := <-done:
		if !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("the request to the suspect leader ended with %v, want outcome unknown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the request to the suspect leader did not end")
	}
}

// lateService takes a follower's request and answers it, committed at
// index 7, only once release is closed: a live leader that commits a
// moment later.
type lateService struct {
	proto.UnimplementedInternalServer
	got     chan struct{}
	release chan struct{}
}

func (s lateService) Forward(stream grpc.BidiStreamingServer[proto.ForwardRequest, proto.ForwardResponse]) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		s.got <- struct{}{}
		<-s.release
		res := make([]*proto.Result, len(req.GetCommands()))
		for i := range res {
			res[i] = &proto.Result{Index: 7}
		}
		if err := stream.Send(&proto.ForwardResponse{Id: req.GetId(), Results: res, Index: 7}); err != nil {
			return nil
		}
	}
}

// A node that leaves a group while it runs on leaves what it forwarded
// its answer: the leader is live, and a command it commits a moment
// later is answered as committed, not as outcome unknown. One the
// leader does not answer within the grace ends as outcome unknown.
func TestForwarder_LeavingTheGroupKeepsTheAnswersInFlight(t *testing.T) {
	for _, answers := range []bool{true, false} {
		svc := lateService{got: make(chan struct{}, 1), release: make(chan struct{})}
		addr, f := forwardTo(t, svc)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		type outcome struct {
			res   []*proto.Result
			index uint64
			err   error
		}
		done := make(chan outcome, 1)
		go func() {
			res, index, err := f.Submit(ctx, "n1", addr, NewRequest([]*proto.Command{{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}}))
			done <- outcome{res, index, err}
		}()
		select {
		case <-svc.got:
		case <-ctx.Done():
			t.Fatal("the request never reached the leader")
		}
		grace := 10 * time.Second
		if !answers {
			grace = 100 * time.Millisecond
		}
		f.Leave(grace)
		if answers {
			close(svc.release)
		}
		select {
		case o := <-done:
			switch {
			case answers && (o.err != nil || o.index != 7 || len(o.res) != 1):
				t.Errorf("answered after the node left the group: %v at %d, %v; want the commit", o.res, o.index, o.err)
			case !answers && !errors.Is(o.err, ErrOutcomeUnknown):
				t.Errorf("unanswered after the grace: %v, want outcome unknown", o.err)
			}
		case <-ctx.Done():
			t.Fatalf("the request did not end (leader answers: %v)", answers)
		}
		if !answers {
			close(svc.release)
		}
		cancel()
	}
}

// A batch the leader committed while the group closed on this node (the
// node left it) answers with its results: nothing applies it here any
// more, as on a node outside the group, and an error would hide the
// commit.
func TestSubmitter_ACommitOfAGroupClosedHereAnswersWithItsResults(t *testing.T) {
	svc := lateService{got: make(chan struct{}, 1), release: make(chan struct{})}
	addr, f := forwardTo(t, svc)
	closing := make(chan struct{})
	s := NewSubmitter(SubmitterConfig{LeaderWait: 5 * time.Second,
		Leader: func(context.Context, time.Time) (Target, error) {
			return Target{ID: "n1", Addr: addr}, nil
		},
		Changed: func() <-chan struct{} { return nil }, Forwarder: f,
		Applied: NewAppliedIndex(), Closing: closing})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type outcome struct {
		res []*proto.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := s.SubmitBatch(ctx, []*proto.Command{{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}})
		done <- outcome{res, err}
	}()
	select {
	case <-svc.got:
	case <-ctx.Done():
		t.Fatal("the request never reached the leader")
	}
	close(closing)
	close(svc.release)
	select {
	case o := <-done:
		if o.err != nil || len(o.res) != 1 || o.res[0].GetIndex() != 7 {
			t.Fatalf("committed while the group closed here: %v, %v; want its results", o.res, o.err)
		}
	case <-ctx.Done():
		t.Fatal("the batch did not end")
	}
}

// drainingService takes one request and ends the stream as a leader that
// drains at its stop does (ServeForward), without answering it: the
// request was never taken.
type drainingService struct {
	proto.UnimplementedInternalServer
}

func (drainingService) Forward(stream grpc.BidiStreamingServer[proto.ForwardRequest, proto.ForwardResponse]) error {
	if _, err := stream.Recv(); err != nil {
		return err
	}
	return status.Error(codes.Aborted, drainedText)
}

// recvAfterSendEOF holds back the error that ends a client stream's
// RecvMsg until a SendMsg on it has failed with io.EOF: the order in
// which a follower that sends as the leader ends the stream learns of
// the end from its Send first. gRPC gives that Send io.EOF, and the
// stream's status only to RecvMsg.
type recvAfterSendEOF struct {
	grpc.ClientStream
	ended   chan struct{} // closed once RecvMsg has the stream's end
	sendEOF chan struct{} // closed once SendMsg failed with io.EOF
	once    *sync.Once
}

func (s recvAfterSendEOF) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		close(s.ended)
		<-s.sendEOF
	}
	return err
}

func (s recvAfterSendEOF) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if errors.Is(err, io.EOF) {
		s.once.Do(func() { close(s.sendEOF) })
	}
	return err
}

// A leader that drains its stream at its stop tells by the stream's
// status that what it did not answer it never took: the follower sends
// it again as not appended, also when its next Send learns of the end
// before its receive loop does (a Send gets io.EOF, never the status).
func TestForwarder_AStreamEndedDrainedLeavesNothingInDoubtWhateverSeesItFirst(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	proto.RegisterInternalServer(srv, drainingService{})
	go func() { _ = srv.Serve(lis) }()
	hold := recvAfterSendEOF{ended: make(chan struct{}), sendEOF: make(chan struct{}), once: new(sync.Once)}
	f := NewForwarder(ForwarderConfig{MaxCommands: 1024, MaxBytes: 1 << 20, Dial: func(id, addr string) (*grpc.ClientConn, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				cs, err := streamer(ctx, desc, cc, method, opts...)
				if err != nil {
					return nil, err
				}
				hold.ClientStream = cs
				return hold, nil
			}))
	}})
	defer func() {
		f.Close()
		srv.Stop()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tick := func() *Request { return NewRequest([]*proto.Command{{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}}) }
	addr := lis.Addr().String()
	first := make(chan error, 1)
	go func() {
		_, _, err := f.Submit(ctx, "n1", addr, tick())
		first <- err
	}()
	select {
	case <-hold.ended:
	case <-ctx.Done():
		t.Fatal("the leader never ended the stream")
	}
	// The stream ended and the receive loop holds its status: this
	// request's Send finds the end first.
	_, _, err = f.Submit(ctx, "n1", addr, tick())
	for i, err := range []error{<-first, err} {
		if !IsRetryable(err) || !errors.Is(err, ErrNotLeader) || errors.Is(err, ErrOutcomeUnknown) {
			t.Errorf("request %d: %v, want not appended", i+1, err)
		}
	}
}
