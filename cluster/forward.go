package cluster

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/raftmq/raftmq/cluster/group"
	"github.com/raftmq/raftmq/proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

// MaxForwardMessage is the largest forwarding message a node sends or
// accepts; a node's gRPC server should allow as much (grpc.MaxRecvMsgSize).
const MaxForwardMessage = 1 << 30

// forwardKeepalive is how often a follower pings the leader on its
// forwarding stream, so a dead leader is noticed without traffic.
const forwardKeepalive = 10 * time.Second

// handshakeTimeout bounds a new connection's TLS and HTTP/2 handshake on
// the node's gRPC server. gRPC's default is 120 s, and its Stop waits for
// every handshake in progress: a peer that connected and then went silent
// (a frozen process's connection, a half-open one) held a stopping node
// that long. A live peer or raftmqctl completes it in milliseconds.
const handshakeTimeout = 3 * time.Second

// baseServerOptions are ServerOptions without credentials.
func baseServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(handshakeTimeout),
		grpc.MaxRecvMsgSize(MaxForwardMessage),
		grpc.MaxSendMsgSize(MaxForwardMessage),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             forwardKeepalive / 2,
			PermitWithoutStream: true,
		}),
	}
}

// forwarder sends a follower's commands to the leader over ONE long-lived
// bidirectional gRPC stream (a session per leader). Requests are batched
// (whatever is queued goes out as one request, hence one log entry) and
// pipelined (many requests in flight).
type forwarder struct {
	n  *Node
	mu sync.Mutex
	s  *fwdSession
}

func newForwarder(n *Node) *forwarder { return &forwarder{n: n} }

// session returns the live session to the leader, opening one if needed;
// a session to a former leader is retired.
func (f *forwarder) session(t leaderTarget) *fwdSession {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.s; s != nil && s.leaderID == t.id && s.addr == t.addr && !s.isDead() {
		return s
	}
	if f.s != nil {
		f.s.retire()
	}
	f.s = newSession(f.n, t)
	return f.s
}

// retire retires the current session (this node became the leader).
func (f *forwarder) retire() {
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

// leaderChanged retires the session to a leader other than id, the leader
// raft just reported (this node's own id when it leads). A leader that
// lost its place may never answer (it is frozen, or cut off with its
// connections open), and raft's election does not wait for it: after
// oldLeaderGrace what is in flight to it ends as outcome unknown, so
// publishers get their nacks about an election after the failure instead
// of after a stream timeout. New commands go to the new leader at once.
func (f *forwarder) leaderChanged(id string) {
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

func (f *forwarder) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.s != nil {
		f.s.retire()
		f.s.shutdown(ErrClosed)
	}
}

// submit forwards p to the leader and waits for the answer.
func (f *forwarder) submit(ctx context.Context, t leaderTarget, p *group.Request) ([]*proto.Result, uint64, error) {
	s := f.session(t)
	select {
	case s.sendQ <- p:
	case <-s.done:
		p.Finish(nil, 0, group.NotAppendedf(ErrNotLeader, "session to %s closed", t.id))
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	select {
	case <-p.Done():
	case <-s.done:
		// Whatever was sent was answered or failed before done closed;
		// a request still queued was never sent.
		p.Finish(nil, 0, group.NotAppendedf(ErrNotLeader, "session to %s closed", t.id))
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	return p.Outcome()
}

// fwdSession is one stream to one leader.
type fwdSession struct {
	n        *Node
	leaderID string
	addr     string
	sendQ    chan *group.Request
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{} // closed once every request is resolved

	mu       sync.Mutex
	inflight map[uint64][]*group.Request
	nextID   uint64
	dead     bool
	stale    bool
}

func newSession(n *Node, t leaderTarget) *fwdSession {
	ctx, cancel := context.WithCancel(context.Background())
	s := &fwdSession{
		n:        n,
		leaderID: t.id,
		addr:     t.addr,
		sendQ:    make(chan *group.Request, 4096),
		ctx:      ctx,
		cancel:   cancel,
		done:     make(chan struct{}),
		inflight: map[uint64][]*group.Request{},
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
	for _, batch := range in {
		for _, p := range batch {
			p.Finish(nil, 0, fmt.Errorf("%w: forwarding to %s: %v", ErrOutcomeUnknown, s.leaderID, cause))
		}
	}
	close(s.done)
}

// dialInternal returns a client of the internal service of node id at
// addr (gRPC dials lazily, on the first call). With TLS, the server's
// certificate must name id.
func (n *Node) dialInternal(id, addr string) (*grpc.ClientConn, error) {
	links := n.cfg.Links
	creds := insecure.NewCredentials()
	if sec := n.cfg.TLS; sec != nil {
		creds = credentials.NewTLS(sec.clientConfig(func(c *x509.Certificate) error {
			return n.checkPeerCert(c, id)
		}))
	}
	return grpc.NewClient(addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return n.out.dial(ctx, addr, 5*time.Second, links.dial)
		}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: forwardKeepalive, Timeout: 5 * time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(MaxForwardMessage), grpc.MaxCallRecvMsgSize(MaxForwardMessage)),
	)
}

func (s *fwdSession) run() {
	// The leader's certificate must name the leader.
	conn, err := s.n.dialInternal(s.leaderID, s.addr)
	if err != nil {
		s.shutdown(err)
		return
	}
	defer conn.Close()
	stream, err := proto.NewInternalClient(conn).Forward(s.ctx)
	if err != nil {
		s.shutdown(err)
		return
	}
	go s.recvLoop(stream)
	for {
		var first *group.Request
		select {
		case first = <-s.sendQ:
		case <-s.ctx.Done():
			s.shutdown(context.Cause(s.ctx))
			return
		}
		batch := []*group.Request{first}
		count, size := len(first.Commands()), first.Size()
	fill:
		for count < s.n.cfg.MaxBatchCommands && size < s.n.cfg.MaxBatchBytes {
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
				p.Finish(nil, 0, group.NotAppendedf(ErrNotLeader, "leader changed from %s", s.leaderID))
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
			s.shutdown(err)
			return
		}
	}
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

func (s *fwdSession) resolve(batch []*group.Request, resp *proto.ForwardResponse) {
	var err error
	switch resp.GetError() {
	case proto.ForwardError_FORWARD_ERROR_NONE:
	case proto.ForwardError_FORWARD_ERROR_NOT_LEADER:
		err = group.NotAppendedf(ErrNotLeader, "%s: %s", s.leaderID, resp.GetErrorText())
	case proto.ForwardError_FORWARD_ERROR_OUTCOME_UNKNOWN:
		err = fmt.Errorf("%w: %s: %s", ErrOutcomeUnknown, s.leaderID, resp.GetErrorText())
	case proto.ForwardError_FORWARD_ERROR_CLOSED:
		err = group.NotAppendedf(ErrNotLeader, "%s is closing: %s", s.leaderID, resp.GetErrorText())
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

// registerInternal registers the Internal service on s with every method
// behind authorizeInternal: the check belongs to the service, so a method
// added to it later cannot be served without it, and no other service on
// the port (the admin API) is affected.
func (n *Node) registerInternal(s *grpc.Server) {
	desc := proto.Internal_ServiceDesc
	desc.Methods = slices.Clone(desc.Methods)
	for i := range desc.Methods {
		h := desc.Methods[i].Handler
		desc.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			if err := n.authorizeInternal(ctx); err != nil {
				return nil, err
			}
			return h(srv, ctx, dec, ic)
		}
	}
	desc.Streams = slices.Clone(desc.Streams)
	for i := range desc.Streams {
		h := desc.Streams[i].Handler
		desc.Streams[i].Handler = func(srv any, st grpc.ServerStream) error {
			if err := n.authorizeInternal(st.Context()); err != nil {
				return err
			}
			return h(srv, st)
		}
	}
	s.RegisterService(&desc, &forwardServer{n: n})
}

// forwardServer serves the internal service: the leader's side of
// Internal.Forward, and every node's Internal.Reply (reply.go); its callers
// are checked by registerInternal.
type forwardServer struct {
	proto.UnimplementedInternalServer
	n *Node
}

// Forward implements proto.InternalServer: each request becomes one pending
// request of the local group commit; answers go back as they complete.
func (fs *forwardServer) Forward(stream grpc.BidiStreamingServer[proto.ForwardRequest, proto.ForwardResponse]) error {
	ctx := stream.Context()
	out := make(chan *proto.ForwardResponse, 4096)
	sendErr := make(chan error, 1)
	go func() {
		for {
			select {
			case r := <-out:
				if err := stream.Send(r); err != nil {
					sendErr <- err
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		select {
		case err := <-sendErr:
			return err
		default:
		}
		id := req.GetId()
		fs.n.batcher.Enqueue(group.NewRequestFunc(req.GetCommands(), func(res []*proto.Result, index uint64, err error) {
			r := forwardResponse(id, res, index, err, fs.n)
			select {
			case out <- r:
			case <-ctx.Done():
			}
		}))
	}
}

func forwardResponse(id uint64, res []*proto.Result, index uint64, err error, n *Node) *proto.ForwardResponse {
	r := &proto.ForwardResponse{Id: id, Results: res, Index: index}
	if err == nil {
		return r
	}
	r.Results = nil
	r.ErrorText = err.Error()
	switch {
	case group.IsRetryable(err) && errors.Is(err, ErrClosed):
		r.Error = proto.ForwardError_FORWARD_ERROR_CLOSED
	case group.IsRetryable(err):
		r.Error = proto.ForwardError_FORWARD_ERROR_NOT_LEADER
		r.LeaderId, _ = n.Leader()
	case errors.Is(err, ErrOutcomeUnknown):
		r.Error = proto.ForwardError_FORWARD_ERROR_OUTCOME_UNKNOWN
	default:
		r.Error = proto.ForwardError_FORWARD_ERROR_FAILED
	}
	return r
}
