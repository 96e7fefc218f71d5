package group

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/proto"
)

// Forwarder sends a follower's commands to the leader over ONE long-lived
// bidirectional gRPC stream (a session per leader). Requests are batched
// (whatever is queued goes out as one request, hence one log entry) and
// pipelined (many requests in flight).
type Forwarder struct {
	cfg ForwarderConfig
	mu  sync.Mutex
	s   *fwdSession
}

// ForwarderConfig is what a forwarder is built with.
type ForwarderConfig struct {
	// MaxCommands and MaxBytes bound one forwarded request, as they do an
	// entry.
	MaxCommands int
	MaxBytes    int
	// Dial returns a client of the internal service of the leader id at
	// its gRPC address addr.
	Dial func(id, addr string) (*grpc.ClientConn, error)
	// Group is the id of the group whose leader the stream reaches,
	// sent in the stream's metadata (ForwardGroup); the default group's
	// stream sends none, as before there were groups.
	Group string
}

// forwardGroupKey is the gRPC metadata key that names the group a
// forwarding stream is for.
const forwardGroupKey = "raftmq-group"

// ForwardGroup is the group a forwarding stream's context names:
// DefaultID when it names none (a node of a release before queue groups,
// or the default group's stream).
func ForwardGroup(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, forwardGroupKey); len(v) == 1 {
		return v[0]
	}
	return DefaultID
}

// NewForwarder returns a forwarder with no session yet.
func NewForwarder(c ForwarderConfig) *Forwarder { return &Forwarder{cfg: c} }

// session returns the live session to the leader, opening one if needed;
// a session to a former leader is retired.
func (f *Forwarder) session(id, addr string) *fwdSession {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.s; s != nil && s.leaderID == id && s.addr == addr && !s.isDead() {
		return s
	}
	if f.s != nil {
		f.s.retire()
	}
	f.s = newSession(f.cfg, id, addr)
	return f.s
}

// Retire retires the current session (this node became the leader).
func (f *Forwarder) Retire() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.s != nil {
		f.s.retire()
		f.s = nil
	}
}

// oldLeaderGrace is how long a former leader still has to answer what is
// in flight to it once raft reports a new leader. A live one that
// committed those commands answers within milliseconds (a leadership
// transfer, for one); a frozen one never does.
const oldLeaderGrace = 200 * time.Millisecond

// LeaderChanged retires the session to a leader other than id, the leader
// raft just reported (this node's own id when it leads). A leader that
// lost its place may never answer (it is frozen, or cut off with its
// connections open), and raft's election does not wait for it: after
// oldLeaderGrace what is in flight to it ends as outcome unknown, so
// publishers get their nacks about an election after the failure instead
// of after a stream timeout. New commands go to the new leader at once.
func (f *Forwarder) LeaderChanged(id string) {
	if id == "" {
		// No leader yet: the old one may still answer.
		return
	}
	f.mu.Lock()
	s := f.s
	if s != nil && s.leaderID != id {
		f.s = nil
	}
	f.mu.Unlock()
	if s != nil && s.leaderID != id {
		s.retire()
		time.AfterFunc(oldLeaderGrace, func() { s.shutdown(fmt.Errorf("leader changed to %s", id)) })
	}
}

// LeaderSuspect retires the session to id, if it is the current one, as
// LeaderChanged does for a leader other than the one raft reports: for a
// node that runs no raft of the group and so hears of no election, a
// leader the cluster no longer reaches (frozen, cut off) is as good as
// replaced. What is in flight to it ends as outcome unknown after
// oldLeaderGrace; new commands look for the leader again.
func (f *Forwarder) LeaderSuspect(id string) {
	f.mu.Lock()
	s := f.s
	if s == nil || s.leaderID != id {
		f.mu.Unlock()
		return
	}
	f.s = nil
	f.mu.Unlock()
	s.retire()
	time.AfterFunc(oldLeaderGrace, func() { s.shutdown(fmt.Errorf("leader %s is not reached", id)) })
}

// Leave retires the session of a node that leaves the group while it
// runs on: nothing more is sent, and what is in flight keeps its answer
// from the leader, which is live, for up to grace; after that it ends as
// outcome unknown. Close, for a node that closes, does not wait.
func (f *Forwarder) Leave(grace time.Duration) {
	f.mu.Lock()
	s := f.s
	f.s = nil
	f.mu.Unlock()
	if s != nil {
		s.retire()
		time.AfterFunc(grace, func() { s.shutdown(ErrClosed) })
	}
}

// Close retires the session and fails what it still has with ErrClosed.
func (f *Forwarder) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.s != nil {
		f.s.retire()
		f.s.shutdown(ErrClosed)
	}
}

// Submit forwards p to the leader id at its gRPC address addr and waits
// for the answer.
func (f *Forwarder) Submit(ctx context.Context, id, addr string, p *Request) ([]*proto.Result, uint64, error) {
	s := f.session(id, addr)
	select {
	case s.sendQ <- p:
	case <-s.done:
		p.Finish(nil, 0, NotAppendedf(ErrNotLeader, "session to %s closed", id))
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	select {
	case <-p.Done():
	case <-s.done:
		// Whatever was sent was answered or failed before done closed;
		// a request still queued was never sent.
		p.Finish(nil, 0, NotAppendedf(ErrNotLeader, "session to %s closed", id))
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	return p.Outcome()
}

// fwdSession is one stream to one leader.
type fwdSession struct {
	cfg      ForwarderConfig
	leaderID string
	addr     string
	sendQ    chan *Request
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{} // closed once every request is resolved

	mu       sync.Mutex
	inflight map[uint64][]*Request
	nextID   uint64
	dead     bool
	stale    bool
}

func newSession(cfg ForwarderConfig, id, addr string) *fwdSession {
	ctx, cancel := context.WithCancel(context.Background())
	s := &fwdSession{
		cfg:      cfg,
		leaderID: id,
		addr:     addr,
		sendQ:    make(chan *Request, 4096),
		ctx:      ctx,
		cancel:   cancel,
		done:     make(chan struct{}),
		inflight: map[uint64][]*Request{},
	}
	go s.run()
	return s
}

func (s *fwdSession) isDead() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dead || s.stale
}

// retire stops new sends; requests in flight still get their answers, then
// the stream closes.
func (s *fwdSession) retire() {
	s.mu.Lock()
	s.stale = true
	idle := len(s.inflight) == 0
	s.mu.Unlock()
	if idle {
		s.cancel()
	}
}

// shutdown fails what is in flight (its outcome is unknown) and ends the
// session; queued requests are failed as never sent by their submitters.
func (s *fwdSession) shutdown(cause error) {
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		return
	}
	s.dead = true
	in := s.inflight
	s.inflight = nil
	s.mu.Unlock()
	s.cancel()
	err := fmt.Errorf("%w: forwarding to %s: %v", ErrOutcomeUnknown, s.leaderID, cause)
	if Drained(cause) {
		// The leader answered every request it took before it ended
		// the stream: the rest never reached it.
		err = NotAppendedf(ErrNotLeader, "%s stopped: %v", s.leaderID, cause)
	}
	for _, batch := range in {
		for _, p := range batch {
			p.Finish(nil, 0, err)
		}
	}
	close(s.done)
}

func (s *fwdSession) run() {
	// The leader's certificate must name the leader.
	conn, err := s.cfg.Dial(s.leaderID, s.addr)
	if err != nil {
		s.shutdown(err)
		return
	}
	defer conn.Close()
	ctx := s.ctx
	if s.cfg.Group != DefaultID {
		ctx = metadata.AppendToOutgoingContext(ctx, forwardGroupKey, s.cfg.Group)
	}
	stream, err := proto.NewInternalClient(conn).Forward(ctx)
	if err != nil {
		s.shutdown(err)
		return
	}
	go s.recvLoop(stream)
	for {
		var first *Request
		select {
		case first = <-s.sendQ:
		case <-s.ctx.Done():
			s.shutdown(context.Cause(s.ctx))
			return
		}
		batch := []*Request{first}
		count, size := len(first.Commands()), first.Size()
	fill:
		for count < s.cfg.MaxCommands && size < s.cfg.MaxBytes {
			select {
			case p := <-s.sendQ:
				batch = append(batch, p)
				count += len(p.Commands())
				size += p.Size()
			default:
				break fill
			}
		}
		s.mu.Lock()
		if s.dead || s.stale {
			s.mu.Unlock()
			for _, p := range batch {
				p.Finish(nil, 0, NotAppendedf(ErrNotLeader, "leader changed from %s", s.leaderID))
			}
			continue
		}
		s.nextID++
		id := s.nextID
		s.inflight[id] = batch
		s.mu.Unlock()
		cmds := make([]*proto.Command, 0, count)
		for _, p := range batch {
			cmds = append(cmds, p.Commands()...)
		}
		if err := stream.Send(&proto.ForwardRequest{Id: id, Commands: cmds}); err != nil {
			s.sendFailed(id, err)
			return
		}
	}
}

// sendFailed ends the session whose Send of the request id failed with
// err. io.EOF means that the stream had ended and the request never went;
// gRPC tells how the stream ended to Recv alone, so the receive loop ends
// the session with it (a leader that drained its stream at its stop
// leaves nothing in doubt), and the connection stays open until it has.
func (s *fwdSession) sendFailed(id uint64, err error) {
	if !errors.Is(err, io.EOF) {
		s.shutdown(err)
		return
	}
	s.mu.Lock()
	batch := s.inflight[id]
	delete(s.inflight, id)
	s.mu.Unlock()
	for _, p := range batch {
		p.Finish(nil, 0, NotAppendedf(ErrNotLeader, "the stream to %s had ended", s.leaderID))
	}
	<-s.done
}

func (s *fwdSession) recvLoop(stream grpc.BidiStreamingClient[proto.ForwardRequest, proto.ForwardResponse]) {
	for {
		resp, err := stream.Recv()
		if err != nil {
			s.shutdown(err)
			return
		}
		s.mu.Lock()
		batch, ok := s.inflight[resp.GetId()]
		delete(s.inflight, resp.GetId())
		idle := s.stale && len(s.inflight) == 0
		s.mu.Unlock()
		if !ok {
			continue
		}
		s.resolve(batch, resp)
		if idle {
			s.cancel()
		}
	}
}

func (s *fwdSession) resolve(batch []*Request, resp *proto.ForwardResponse) {
	var err error
	switch resp.GetError() {
	case proto.ForwardError_FORWARD_ERROR_NONE:
	case proto.ForwardError_FORWARD_ERROR_NOT_LEADER:
		// The refuser names the leader it knows of: the caller may go
		// straight to it.
		err = NotLeaderf(resp.GetLeaderId(), "%s: %s", s.leaderID, resp.GetErrorText())
	case proto.ForwardError_FORWARD_ERROR_OUTCOME_UNKNOWN:
		err = fmt.Errorf("%w: %s: %s", ErrOutcomeUnknown, s.leaderID, resp.GetErrorText())
	case proto.ForwardError_FORWARD_ERROR_CLOSED:
		err = NotAppendedf(ErrNotLeader, "%s is closing: %s", s.leaderID, resp.GetErrorText())
	default:
		err = fmt.Errorf("cluster: forwarded to %s: %s", s.leaderID, resp.GetErrorText())
	}
	if err != nil {
		for _, p := range batch {
			p.Finish(nil, 0, err)
		}
		return
	}
	want := 0
	for _, p := range batch {
		want += len(p.Commands())
	}
	res := resp.GetResults()
	if len(res) != want {
		err := fmt.Errorf("cluster: %s answered %d results for %d commands", s.leaderID, len(res), want)
		for _, p := range batch {
			p.Finish(nil, resp.GetIndex(), err)
		}
		return
	}
	off := 0
	for _, p := range batch {
		p.Finish(res[off:off+len(p.Commands()):off+len(p.Commands())], resp.GetIndex(), nil)
		off += len(p.Commands())
	}
}

// ServeForward serves a follower's stream on the leader: each request
// becomes one request of the group commit b; answers go back as they
// complete, a refusal for want of leadership naming the leader leader
// reports. Once drain closes (the node stops), it takes no more
// requests, sends the answers of those it took, and ends the stream
// with Drained: a follower then knows that every request left without
// an answer never reached a log, and sends it again to the next leader.
// A stream broken any other way leaves those requests' outcome unknown.
func ServeForward(stream grpc.BidiStreamingServer[proto.ForwardRequest, proto.ForwardResponse], b *Batcher, leader func() string, drain <-chan struct{}) error {
	ctx := stream.Context()
	out := make(chan *proto.ForwardResponse, 4096)
	sendErr := make(chan error, 1)
	quit, sent := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sent)
		for {
			select {
			case r := <-out:
				if err := stream.Send(r); err != nil {
					sendErr <- err
					return
				}
			case <-quit:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	reqs, recvDone := make(chan *proto.ForwardRequest), make(chan struct{})
	go func() {
		defer close(recvDone)
		for {
			req, err := stream.Recv()
			if err != nil {
				return
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	var pending sync.WaitGroup // requests taken and not yet answered
	for {
		select {
		case req := <-reqs:
			id := req.GetId()
			pending.Add(1)
			b.Enqueue(NewRequestFunc(req.GetCommands(), func(res []*proto.Result, index uint64, err error) {
				defer pending.Done()
				r := forwardResponse(id, res, index, err, leader)
				select {
				case out <- r:
				case <-ctx.Done():
				}
			}))
		case <-recvDone:
			return nil
		case err := <-sendErr:
			return err
		case <-drain:
			return drainForward(ctx, stream, &pending, out, quit, sent, sendErr)
		}
	}
}

// drainWait bounds how long a stopping node's forwarding stream waits
// for the answers of the requests it took: the node's groups answer
// them as they close, at once.
const drainWait = 2 * time.Second

// drainForward is ServeForward's end at a drain: it waits for the
// answers of the requests taken, sends them after the sender's, and
// ends the stream with Drained.
func drainForward(ctx context.Context, stream grpc.BidiStreamingServer[proto.ForwardRequest, proto.ForwardResponse], pending *sync.WaitGroup, out chan *proto.ForwardResponse, quit, sent chan struct{}, sendErr chan error) error {
	answered := make(chan struct{})
	go func() {
		pending.Wait()
		close(answered)
	}()
	t := time.NewTimer(drainWait)
	defer t.Stop()
	select {
	case <-answered:
	case <-t.C:
		// Not all answered: the stream breaks, and what it carried is
		// in doubt, as without a drain.
		return status.Error(codes.Unavailable, "forwarding stream: the node stops with requests unanswered")
	case <-ctx.Done():
		return ctx.Err()
	}
	close(quit)
	<-sent
	select {
	case err := <-sendErr:
		return err
	default:
	}
	for {
		select {
		case r := <-out:
			if err := stream.Send(r); err != nil {
				return err
			}
		default:
			return status.Error(codes.Aborted, drainedText)
		}
	}
}

// drainedText is the message of the status that ends a forwarding stream
// drained (ServeForward). gRPC itself never ends a stream Aborted.
const drainedText = "raftmq: forwarding stream drained: every request taken was answered"

// Drained reports whether err ends a forwarding stream that its server
// drained: the requests left unanswered were never taken.
func Drained(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Aborted && st.Message() == drainedText
}

// RefuseForward answers each request of a stream for a group this node
// does not run (yet, or any more) as not appended for want of a leader,
// so that the follower asks for the leader again and sends it anew.
func RefuseForward(stream grpc.BidiStreamingServer[proto.ForwardRequest, proto.ForwardResponse], why string) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		r := forwardResponse(req.GetId(), nil, 0, NotAppendedf(ErrNotLeader, "%s", why), func() string { return "" })
		if err := stream.Send(r); err != nil {
			return err
		}
	}
}

func forwardResponse(id uint64, res []*proto.Result, index uint64, err error, leader func() string) *proto.ForwardResponse {
	r := &proto.ForwardResponse{Id: id, Results: res, Index: index}
	if err == nil {
		return r
	}
	r.Results = nil
	r.ErrorText = err.Error()
	switch {
	case IsRetryable(err) && errors.Is(err, ErrClosed):
		r.Error = proto.ForwardError_FORWARD_ERROR_CLOSED
	case IsRetryable(err):
		r.Error = proto.ForwardError_FORWARD_ERROR_NOT_LEADER
		r.LeaderId = leader()
	case errors.Is(err, ErrOutcomeUnknown):
		r.Error = proto.ForwardError_FORWARD_ERROR_OUTCOME_UNKNOWN
	default:
		r.Error = proto.ForwardError_FORWARD_ERROR_FAILED
	}
	return r
}
