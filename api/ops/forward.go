package ops

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	protobuf "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/api/client"
	"github.com/raftmq/raftmq/proto"
)

// Calls to other nodes: what only the leader can do is forwarded to it, a
// consistent read is served by it, and what every node knows of itself
// (connections, alarms) is asked of each. The peers answer through their
// Admin service, with the caller's credentials.

// forwardedKey marks a call a follower forwarded to the leader, so that a
// node that lost leadership in between answers Unavailable instead of
// forwarding again.
const forwardedKey = "raftmq-forwarded"

// awaitLeader returns the leader's id, "" when this node leads. While no
// leader is known (an election, a leadership hand-over) it waits, up to
// leaderWait or the call's deadline: an operator's command run in that
// second is served once it is over, as a publish is, instead of failing.
func (s *Service) awaitLeader(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.leaderWait)
	defer cancel()
	backoff := 10 * time.Millisecond
	for {
		if s.node.IsLeader() {
			return "", nil
		}
		if id, _ := s.node.Leader(); id != "" {
			return id, nil
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return "", fail(Unavailable, "no leader is known")
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// leaderAdmin returns an Admin client of leader id.
func (s *Service) leaderAdmin(id string) (proto.AdminClient, error) {
	addr := s.memberAddr(id)
	if addr == "" {
		return nil, fail(Unavailable, "leader %s has no known gRPC address", id)
	}
	return s.peers.Admin(addr)
}

// memberAddr is the gRPC address of member id, "" when unknown.
func (s *Service) memberAddr(id string) string {
	for _, m := range s.node.Members() {
		if m.GetId() == id {
			return m.GetGrpcAddr()
		}
	}
	return ""
}

func wasForwarded(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	return ok && len(md.Get(forwardedKey)) > 0
}

// onLeader runs a call on the leader: locally when this node leads,
// otherwise forwarded once with the same request.
func onLeader[Req, Resp any](ctx context.Context, s *Service, req Req,
	call func(proto.AdminClient, context.Context, Req, ...grpc.CallOption) (Resp, error),
	local func() (Resp, error)) (Resp, error) {
	var zero Resp
	if s.node.IsLeader() {
		return local()
	}
	if wasForwarded(ctx) {
		return zero, fail(Unavailable, "not the leader (leadership changed while forwarding)")
	}
	id, err := s.awaitLeader(ctx)
	if err != nil {
		return zero, err
	}
	if id == "" {
		return local()
	}
	c, err := s.leaderAdmin(id)
	if err != nil {
		return zero, err
	}
	r, err := call(c, metadata.AppendToOutgoingContext(withCallerCredentials(ctx), forwardedKey, s.node.NodeID()), req)
	return r, peerError(err)
}

// withCallerCredentials passes the incoming call's credentials on to a call
// this node makes to another node for it, so that the other node checks
// the same user (a node certificate, when the cluster has one, lets it
// through anyway).
func withCallerCredentials(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(client.AuthorizationKey); len(v) > 0 {
		return metadata.AppendToOutgoingContext(ctx, client.AuthorizationKey, v[0])
	}
	return ctx
}

// read serves a read from the local state, or, when consistent, from the
// leader's state. The response is copied under the node's lock, so nothing
// in it aliases the state machine once the lock is released.
func read[Req any, Resp protobuf.Message](ctx context.Context, s *Service, consistent bool, req Req,
	call func(proto.AdminClient, context.Context, Req, ...grpc.CallOption) (Resp, error),
	local func(State) Resp) (Resp, error) {
	copied := func(st State) Resp {
		r := local(st)
		if !r.ProtoReflect().IsValid() {
			return r
		}
		return protobuf.Clone(r).(Resp)
	}
	if !consistent {
		var out Resp
		s.node.View(func(st State) { out = copied(st) })
		return out, nil
	}
	return onLeader(ctx, s, req, call, func() (Resp, error) {
		var out Resp
		if cv, ok := s.node.(ConsistentViewer); ok {
			err := cv.ConsistentView(ctx, func(st State) { out = copied(st) })
			if err != nil {
				return out, nodeError(err, Unavailable, "consistent read")
			}
			return out, nil
		}
		s.node.View(func(st State) { out = copied(st) })
		return out, nil
	})
}

// askPeers calls ask on the Admin service of every other alive member in
// parallel, each within the peer timeout and with the caller's
// credentials, and hands each answer to keep, one at a time; a peer that
// cannot be reached or fails is logged (what) and left out.
func askPeers[T any](ctx context.Context, s *Service, what string, ask func(context.Context, proto.AdminClient) (T, error), keep func(id string, r T)) {
	self := s.node.NodeID()
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, m := range s.node.Members() {
		if m.GetId() == self || m.GetGrpcAddr() == "" || (m.GetHealth() != "" && m.GetHealth() != "alive") {
			continue
		}
		c, err := s.peers.Admin(m.GetGrpcAddr())
		if err != nil {
			s.log.Warn(what+": peer unreachable", "node", m.GetId(), "err", err)
			continue
		}
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(withCallerCredentials(ctx), s.peerTimeout)
			defer cancel()
			r, err := ask(pctx, c)
			if err != nil {
				s.log.Warn(what+": peer failed", "node", id, "err", err)
				return
			}
			mu.Lock()
			keep(id, r)
			mu.Unlock()
		}(m.GetId())
	}
	wg.Wait()
}
