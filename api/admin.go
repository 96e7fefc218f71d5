package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"regexp"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	protobuf "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// forwardedKey marks a call a follower forwarded to the leader, so that a
// node that lost leadership in between answers Unavailable instead of
// forwarding again.
const forwardedKey = "raftmq-forwarded"

// defaultVhost is the vhost a write addresses when the request names none.
const defaultVhost = "/"

// AdminServer implements the raftmq.v1.Admin gRPC service on one node.
type AdminServer struct {
	proto.UnimplementedAdminServer

	node        Node
	conns       Connections
	peers       Peers
	ownPool     *PeerPool // the pool NewAdminServer made, closed by Close
	peerTimeout time.Duration
	log         *slog.Logger
	counters    func() NodeCounters
	resources   func() Resources
}

// NewAdminServer returns the Admin service of the node in d. Register it
// with proto.RegisterAdminServer.
func NewAdminServer(d Deps) *AdminServer {
	s := &AdminServer{
		node:        d.Node,
		conns:       d.Conns,
		peers:       d.Peers,
		peerTimeout: d.PeerTimeout,
		log:         d.Logger,
		counters:    d.Counters,
		resources:   d.Resources,
	}
	if s.peers == nil {
		s.ownPool = NewPeerPool()
		s.peers = s.ownPool
	}
	if s.peerTimeout <= 0 {
		s.peerTimeout = 2 * time.Second
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.log = s.log.With("component", "api")
	return s
}

// nodeCounters reads this node's own AMQP counters (zeros without them).
func (s *AdminServer) nodeCounters() NodeCounters {
	if s.counters == nil {
		return NodeCounters{}
	}
	return s.counters()
}

// Close closes the connections to peers the server opened itself (not
// those of a Peers given in Deps).
func (s *AdminServer) Close() error {
	if s.ownPool == nil {
		return nil
	}
	return s.ownPool.Close()
}

// ---- plumbing ----

// submit proposes cmd and maps a failure or a refused command to a status.
func (s *AdminServer) submit(ctx context.Context, cmd *proto.Command) (*proto.Result, error) {
	r, err := s.node.Submit(ctx, cmd)
	if err != nil {
		return nil, nodeError(err, codes.Unavailable, "submit")
	}
	if err := resultError(r); err != nil {
		return nil, err
	}
	return r, nil
}

// leaderAdmin returns an Admin client of the current leader.
func (s *AdminServer) leaderAdmin() (proto.AdminClient, error) {
	id, _ := s.node.Leader()
	if id == "" {
		return nil, status.Error(codes.Unavailable, "no leader is known")
	}
	addr := s.memberAddr(id)
	if addr == "" {
		return nil, status.Errorf(codes.Unavailable, "leader %s has no known gRPC address", id)
	}
	return s.peers.Admin(addr)
}

// memberAddr is the gRPC address of member id, "" when unknown.
func (s *AdminServer) memberAddr(id string) string {
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
func onLeader[Req, Resp any](ctx context.Context, s *AdminServer, req Req,
	call func(proto.AdminClient, context.Context, Req, ...grpc.CallOption) (Resp, error),
	local func() (Resp, error)) (Resp, error) {
	if s.node.IsLeader() {
		return local()
	}
	var zero Resp
	if wasForwarded(ctx) {
		return zero, status.Error(codes.Unavailable, "not the leader (leadership changed while forwarding)")
	}
	c, err := s.leaderAdmin()
	if err != nil {
		return zero, err
	}
	return call(c, metadata.AppendToOutgoingContext(withCallerCredentials(ctx), forwardedKey, s.node.NodeID()), req)
}

// read serves a read from the local state, or, when consistent, from the
// leader's state. The response is copied under the node's lock, so nothing
// in it aliases the state machine once the lock is released.
func read[Req any, Resp protobuf.Message](ctx context.Context, s *AdminServer, consistent bool, req Req,
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
				return out, nodeError(err, codes.Unavailable, "consistent read")
			}
			return out, nil
		}
		s.node.View(func(st State) { out = copied(st) })
		return out, nil
	})
}

func orDefaultVhost(v string) string {
	if v == "" {
		return defaultVhost
	}
	return v
}

// ---- cluster ----

// ClusterStatus implements proto.AdminServer.
func (s *AdminServer) ClusterStatus(ctx context.Context, req *proto.ClusterStatusRequest) (*proto.ClusterStatusResponse, error) {
	local := func() (*proto.ClusterStatusResponse, error) { return s.clusterStatus(), nil }
	if !req.GetConsistent() {
		return local()
	}
	return onLeader(ctx, s, req, proto.AdminClient.ClusterStatus, local)
}

func (s *AdminServer) clusterStatus() *proto.ClusterStatusResponse {
	st := s.node.RaftStats()
	lid, laddr := s.node.Leader()
	resp := &proto.ClusterStatusResponse{
		NodeId:       s.node.NodeID(),
		LeaderId:     lid,
		LeaderAddr:   laddr,
		RaftState:    st.State,
		Term:         st.Term,
		CommitIndex:  st.CommitIndex,
		AppliedIndex: st.AppliedIndex,
		LastLogIndex: st.LastLogIndex,
		Nodes:        s.node.Members(),
	}
	s.node.View(func(m State) { resp.ClockMs = m.Clock() })
	r := s.nodeResources()
	resp.Alarms, resp.DiskFree, resp.DiskFreeLimit = r.Alarms(), r.DiskFree, r.DiskFreeLimit
	resp.ClockProblem = clockProblem(s.node)
	return resp
}

// TransferLeadership implements proto.AdminServer. A follower forwards it
// to the leader.
func (s *AdminServer) TransferLeadership(ctx context.Context, req *proto.TransferLeadershipRequest) (*proto.TransferLeadershipResponse, error) {
	return onLeader(ctx, s, req, proto.AdminClient.TransferLeadership, func() (*proto.TransferLeadershipResponse, error) {
		if id := req.GetNodeId(); id != "" && !s.isMember(id) {
			return nil, status.Errorf(codes.NotFound, "node %q is not a member", id)
		}
		self := s.node.NodeID()
		if req.GetNodeId() == self {
			return &proto.TransferLeadershipResponse{LeaderId: self}, nil
		}
		if err := s.node.TransferLeadership(ctx, req.GetNodeId()); err != nil {
			return nil, nodeError(err, codes.FailedPrecondition, "transfer leadership")
		}
		// Wait, within the call's deadline, until another leader is known.
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if id, _ := s.node.Leader(); id != "" && id != self {
				return &proto.TransferLeadershipResponse{LeaderId: id}, nil
			}
			select {
			case <-wctx.Done():
				id, _ := s.node.Leader()
				return &proto.TransferLeadershipResponse{LeaderId: id}, nil
			case <-t.C:
			}
		}
	})
}

func (s *AdminServer) isMember(id string) bool {
	for _, m := range s.node.Members() {
		if m.GetId() == id {
			return true
		}
	}
	return false
}

// RemoveNode implements proto.AdminServer. A follower forwards it to the
// leader.
func (s *AdminServer) RemoveNode(ctx context.Context, req *proto.RemoveNodeRequest) (*proto.RemoveNodeResponse, error) {
	if req.GetNodeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "node id must not be empty")
	}
	return onLeader(ctx, s, req, proto.AdminClient.RemoveNode, func() (*proto.RemoveNodeResponse, error) {
		if !s.isMember(req.GetNodeId()) {
			return nil, status.Errorf(codes.NotFound, "node %q is not a member", req.GetNodeId())
		}
		if err := s.node.RemoveNode(ctx, req.GetNodeId()); err != nil {
			return nil, nodeError(err, codes.FailedPrecondition, "remove node")
		}
		return &proto.RemoveNodeResponse{}, nil
	})
}

// ---- queues and topology ----

// ListQueues implements proto.AdminServer.
func (s *AdminServer) ListQueues(ctx context.Context, req *proto.ListQueuesRequest) (*proto.ListQueuesResponse, error) {
	return read(ctx, s, req.GetConsistent(), req, proto.AdminClient.ListQueues, func(st State) *proto.ListQueuesResponse {
		return &proto.ListQueuesResponse{Queues: st.Queues(req.GetVhost())}
	})
}

// GetQueue implements proto.AdminServer.
func (s *AdminServer) GetQueue(ctx context.Context, req *proto.GetQueueRequest) (*proto.QueueInfo, error) {
	vhost := orDefaultVhost(req.GetVhost())
	q, err := read(ctx, s, req.GetConsistent(), req, proto.AdminClient.GetQueue, func(st State) *proto.QueueInfo {
		q, ok := st.Queue(vhost, req.GetName())
		if !ok {
			return nil
		}
		return q
	})
	if err != nil {
		return nil, err
	}
	if q == nil {
		return nil, status.Errorf(codes.NotFound, "no queue '%s' in vhost '%s'", req.GetName(), vhost)
	}
	return q, nil
}

// PurgeQueue implements proto.AdminServer.
func (s *AdminServer) PurgeQueue(ctx context.Context, req *proto.PurgeQueueRequest) (*proto.PurgeQueueResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "queue name must not be empty")
	}
	r, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_QueuePurge{QueuePurge: &proto.QueuePurge{
		Vhost: orDefaultVhost(req.GetVhost()), Name: req.GetName(),
	}}})
	if err != nil {
		return nil, err
	}
	return &proto.PurgeQueueResponse{MessageCount: r.GetMessageCount()}, nil
}

// DeleteQueue implements proto.AdminServer.
func (s *AdminServer) DeleteQueue(ctx context.Context, req *proto.DeleteQueueRequest) (*proto.DeleteQueueResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "queue name must not be empty")
	}
	r, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{
		Vhost: orDefaultVhost(req.GetVhost()), Name: req.GetName(),
		IfUnused: req.GetIfUnused(), IfEmpty: req.GetIfEmpty(),
	}}})
	if err != nil {
		return nil, err
	}
	return &proto.DeleteQueueResponse{MessageCount: r.GetMessageCount()}, nil
}

// ListExchanges implements proto.AdminServer.
func (s *AdminServer) ListExchanges(ctx context.Context, req *proto.ListRequest) (*proto.ListExchangesResponse, error) {
	return read(ctx, s, req.GetConsistent(), req, proto.AdminClient.ListExchanges, func(st State) *proto.ListExchangesResponse {
		return &proto.ListExchangesResponse{Exchanges: st.Exchanges(req.GetVhost())}
	})
}

// ListBindings implements proto.AdminServer.
func (s *AdminServer) ListBindings(ctx context.Context, req *proto.ListRequest) (*proto.ListBindingsResponse, error) {
	return read(ctx, s, req.GetConsistent(), req, proto.AdminClient.ListBindings, func(st State) *proto.ListBindingsResponse {
		return &proto.ListBindingsResponse{Bindings: st.Bindings(req.GetVhost())}
	})
}

// ListConsumers implements proto.AdminServer.
func (s *AdminServer) ListConsumers(ctx context.Context, req *proto.ListRequest) (*proto.ListConsumersResponse, error) {
	return read(ctx, s, req.GetConsistent(), req, proto.AdminClient.ListConsumers, func(st State) *proto.ListConsumersResponse {
		return &proto.ListConsumersResponse{Consumers: st.Consumers(req.GetVhost())}
	})
}

// ListConnections implements proto.AdminServer. Unless req.Local, it asks
// every other alive member for its connections in parallel (each within
// the peer timeout) and merges them with this node's; a peer that does not
// answer is logged and left out.
func (s *AdminServer) ListConnections(ctx context.Context, req *proto.ListConnectionsRequest) (*proto.ListConnectionsResponse, error) {
	out := &proto.ListConnectionsResponse{Connections: s.localConnections()}
	if req.GetLocal() {
		return out, nil
	}
	askPeers(ctx, s, "list connections", func(ctx context.Context, c proto.AdminClient) (*proto.ListConnectionsResponse, error) {
		return c.ListConnections(ctx, &proto.ListConnectionsRequest{Local: true})
	}, func(_ string, r *proto.ListConnectionsResponse) {
		out.Connections = append(out.Connections, r.GetConnections()...)
	})
	sortConnections(out.Connections)
	return out, nil
}

// askPeers calls ask on the Admin service of every other alive member in
// parallel, each within the peer timeout and with the caller's
// credentials, and hands each answer to keep, one at a time; a peer that
// cannot be reached or fails is logged (what) and left out.
func askPeers[T any](ctx context.Context, s *AdminServer, what string, ask func(context.Context, proto.AdminClient) (T, error), keep func(id string, r T)) {
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

// sortConnections orders connections by node, then id.
func sortConnections(cs []*proto.ConnectionInfo) {
	sort.Slice(cs, func(i, j int) bool {
		if cs[i].GetNode() != cs[j].GetNode() {
			return cs[i].GetNode() < cs[j].GetNode()
		}
		return cs[i].GetId() < cs[j].GetId()
	})
}

func (s *AdminServer) localConnections() []*proto.ConnectionInfo {
	if s.conns == nil {
		return nil
	}
	self := s.node.NodeID()
	list := s.conns.List()
	for _, c := range list {
		if c.GetNode() == "" {
			c.Node = self
		}
	}
	return list
}

// CloseConnection implements proto.AdminServer: it closes a connection of
// this node, or routes the call to the node named in the request.
func (s *AdminServer) CloseConnection(ctx context.Context, req *proto.CloseConnectionRequest) (*proto.CloseConnectionResponse, error) {
	if req.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "connection id must not be empty")
	}
	node := req.GetNode()
	if node == "" || node == s.node.NodeID() {
		if s.conns == nil || !s.conns.Close(req.GetId(), req.GetReason()) {
			return nil, status.Errorf(codes.NotFound, "no connection %q on node %s", req.GetId(), s.node.NodeID())
		}
		return &proto.CloseConnectionResponse{}, nil
	}
	addr := s.memberAddr(node)
	if addr == "" {
		return nil, status.Errorf(codes.NotFound, "node %q is not a member", node)
	}
	c, err := s.peers.Admin(addr)
	if err != nil {
		return nil, nodeError(err, codes.Unavailable, "dial "+node)
	}
	return c.CloseConnection(withCallerCredentials(ctx), req)
}

// ---- policies ----

// SetPolicy implements proto.AdminServer. The definition is validated
// before anything goes into the log.
func (s *AdminServer) SetPolicy(ctx context.Context, req *proto.SetPolicyRequest) (*proto.SetPolicyResponse, error) {
	applyTo := req.GetApplyTo()
	if applyTo == "" {
		applyTo = "all"
	}
	if err := validatePolicy(req.GetName(), req.GetPattern(), applyTo, req.GetDefinition()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	_, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_PolicySet{PolicySet: &proto.PolicySet{
		Vhost: orDefaultVhost(req.GetVhost()), Name: req.GetName(), Pattern: req.GetPattern(),
		ApplyTo: applyTo, Priority: req.GetPriority(), Definition: req.GetDefinition(), Operator: req.GetOperator(),
	}}})
	if err != nil {
		return nil, err
	}
	return &proto.SetPolicyResponse{}, nil
}

// ClearPolicy implements proto.AdminServer.
func (s *AdminServer) ClearPolicy(ctx context.Context, req *proto.ClearPolicyRequest) (*proto.ClearPolicyResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "policy name must not be empty")
	}
	_, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_PolicyClear{PolicyClear: &proto.PolicyClear{
		Vhost: orDefaultVhost(req.GetVhost()), Name: req.GetName(), Operator: req.GetOperator(),
	}}})
	if err != nil {
		return nil, err
	}
	return &proto.ClearPolicyResponse{}, nil
}

// ListPolicies implements proto.AdminServer.
func (s *AdminServer) ListPolicies(ctx context.Context, req *proto.ListPoliciesRequest) (*proto.ListPoliciesResponse, error) {
	return read(ctx, s, req.GetConsistent(), req, proto.AdminClient.ListPolicies, func(st State) *proto.ListPoliciesResponse {
		return &proto.ListPoliciesResponse{Policies: st.Policies(req.GetVhost(), req.GetOperator())}
	})
}

// ---- users, permissions, vhosts ----

// hashPassword salts (4 random bytes) and hashes a password; the plain
// password never leaves this function.
func hashPassword(password string) ([]byte, error) {
	salt := make([]byte, fsm.PasswordSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return nil, status.Errorf(codes.Internal, "password salt: %v", err)
	}
	return fsm.HashPassword(salt, password), nil
}

// user returns the named user from the local state.
func (s *AdminServer) user(name string) (*proto.UserInfo, bool) {
	var u *proto.UserInfo
	s.node.View(func(st State) {
		for _, x := range st.Users() {
			if x.GetName() == name {
				u = protobuf.Clone(x).(*proto.UserInfo)
				return
			}
		}
	})
	return u, u != nil
}

// AddUser implements proto.AdminServer.
func (s *AdminServer) AddUser(ctx context.Context, req *proto.AddUserRequest) (*proto.AddUserResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "user name must not be empty")
	}
	if _, ok := s.user(req.GetName()); ok {
		return nil, status.Errorf(codes.AlreadyExists, "user '%s' already exists", req.GetName())
	}
	hash, err := hashPassword(req.GetPassword())
	if err != nil {
		return nil, err
	}
	if _, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_UserPut{UserPut: &proto.UserPut{
		Name: req.GetName(), PasswordHash: hash, HashAlgorithm: fsm.PasswordHashAlgorithm, Tags: req.GetTags(),
	}}}); err != nil {
		return nil, err
	}
	return &proto.AddUserResponse{}, nil
}

// DeleteUser implements proto.AdminServer.
func (s *AdminServer) DeleteUser(ctx context.Context, req *proto.DeleteUserRequest) (*proto.DeleteUserResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "user name must not be empty")
	}
	if _, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_UserDelete{UserDelete: &proto.UserDelete{Name: req.GetName()}}}); err != nil {
		return nil, err
	}
	return &proto.DeleteUserResponse{}, nil
}

// ChangePassword implements proto.AdminServer. It rewrites the user with a
// new salted hash and its current tags.
func (s *AdminServer) ChangePassword(ctx context.Context, req *proto.ChangePasswordRequest) (*proto.ChangePasswordResponse, error) {
	u, ok := s.user(req.GetName())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no user '%s'", req.GetName())
	}
	hash, err := hashPassword(req.GetPassword())
	if err != nil {
		return nil, err
	}
	if _, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_UserPut{UserPut: &proto.UserPut{
		Name: u.GetName(), PasswordHash: hash, HashAlgorithm: fsm.PasswordHashAlgorithm, Tags: u.GetTags(),
	}}}); err != nil {
		return nil, err
	}
	return &proto.ChangePasswordResponse{}, nil
}

// SetUserTags implements proto.AdminServer. It rewrites the user with its
// stored password hash.
func (s *AdminServer) SetUserTags(ctx context.Context, req *proto.SetUserTagsRequest) (*proto.SetUserTagsResponse, error) {
	var (
		hash      []byte
		algorithm string
		found     bool
	)
	s.node.View(func(st State) {
		hash, algorithm, found = st.UserPasswordHash(req.GetName())
		hash = append([]byte(nil), hash...)
	})
	if !found {
		return nil, status.Errorf(codes.NotFound, "no user '%s'", req.GetName())
	}
	if _, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_UserPut{UserPut: &proto.UserPut{
		Name: req.GetName(), PasswordHash: hash, HashAlgorithm: algorithm, Tags: req.GetTags(),
	}}}); err != nil {
		return nil, err
	}
	return &proto.SetUserTagsResponse{}, nil
}

// ListUsers implements proto.AdminServer.
func (s *AdminServer) ListUsers(ctx context.Context, req *proto.ListRequest) (*proto.ListUsersResponse, error) {
	return read(ctx, s, req.GetConsistent(), req, proto.AdminClient.ListUsers, func(st State) *proto.ListUsersResponse {
		return &proto.ListUsersResponse{Users: st.Users()}
	})
}

// SetPermissions implements proto.AdminServer.
func (s *AdminServer) SetPermissions(ctx context.Context, req *proto.SetPermissionsRequest) (*proto.SetPermissionsResponse, error) {
	if req.GetUser() == "" {
		return nil, status.Error(codes.InvalidArgument, "user name must not be empty")
	}
	for _, p := range [][2]string{{"configure", req.GetConfigure()}, {"write", req.GetWrite()}, {"read", req.GetRead()}} {
		if _, err := regexp.Compile(p[1]); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "%s pattern %q does not compile: %v", p[0], p[1], err)
		}
	}
	if _, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_PermissionSet{PermissionSet: &proto.PermissionSet{
		User: req.GetUser(), Vhost: orDefaultVhost(req.GetVhost()),
		Configure: req.GetConfigure(), Write: req.GetWrite(), Read: req.GetRead(),
	}}}); err != nil {
		return nil, err
	}
	return &proto.SetPermissionsResponse{}, nil
}

// ClearPermissions implements proto.AdminServer.
func (s *AdminServer) ClearPermissions(ctx context.Context, req *proto.ClearPermissionsRequest) (*proto.ClearPermissionsResponse, error) {
	if req.GetUser() == "" {
		return nil, status.Error(codes.InvalidArgument, "user name must not be empty")
	}
	if _, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_PermissionClear{PermissionClear: &proto.PermissionClear{
		User: req.GetUser(), Vhost: orDefaultVhost(req.GetVhost()),
	}}}); err != nil {
		return nil, err
	}
	return &proto.ClearPermissionsResponse{}, nil
}

// ListPermissions implements proto.AdminServer. A vhost in the request
// keeps only that vhost's permissions.
func (s *AdminServer) ListPermissions(ctx context.Context, req *proto.ListRequest) (*proto.ListPermissionsResponse, error) {
	return read(ctx, s, req.GetConsistent(), req, proto.AdminClient.ListPermissions, func(st State) *proto.ListPermissionsResponse {
		out := &proto.ListPermissionsResponse{}
		for _, p := range st.Permissions() {
			if req.GetVhost() == "" || p.GetVhost() == req.GetVhost() {
				out.Permissions = append(out.Permissions, p)
			}
		}
		return out
	})
}

// AddVhost implements proto.AdminServer.
func (s *AdminServer) AddVhost(ctx context.Context, req *proto.AddVhostRequest) (*proto.AddVhostResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "vhost name must not be empty")
	}
	if _, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{
		Name: req.GetName(), Description: req.GetDescription(),
	}}}); err != nil {
		return nil, err
	}
	return &proto.AddVhostResponse{}, nil
}

// DeleteVhost implements proto.AdminServer.
func (s *AdminServer) DeleteVhost(ctx context.Context, req *proto.DeleteVhostRequest) (*proto.DeleteVhostResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "vhost name must not be empty")
	}
	if _, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_VhostDelete{VhostDelete: &proto.VhostDelete{Name: req.GetName()}}}); err != nil {
		return nil, err
	}
	return &proto.DeleteVhostResponse{}, nil
}

// ListVhosts implements proto.AdminServer.
func (s *AdminServer) ListVhosts(ctx context.Context, req *proto.ListRequest) (*proto.ListVhostsResponse, error) {
	return read(ctx, s, req.GetConsistent(), req, proto.AdminClient.ListVhosts, func(st State) *proto.ListVhostsResponse {
		out := &proto.ListVhostsResponse{}
		for _, v := range st.Vhosts() {
			if req.GetVhost() == "" || v.GetName() == req.GetVhost() {
				out.Vhosts = append(out.Vhosts, v)
			}
		}
		return out
	})
}

// Digest implements proto.AdminServer: this node's state digest.
func (s *AdminServer) Digest(_ context.Context, _ *proto.DigestRequest) (*proto.DigestResponse, error) {
	resp := &proto.DigestResponse{NodeId: s.node.NodeID()}
	s.node.View(func(st State) {
		d := st.Digest()
		resp.Digest = hex.EncodeToString(d[:])
		resp.AppliedIndex = st.AppliedIndex()
	})
	return resp, nil
}
