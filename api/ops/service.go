package ops

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"regexp"
	"runtime"
	"sort"
	"time"

	protobuf "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/internal/procstat"
	"github.com/raftmq/raftmq/internal/version"
	"github.com/raftmq/raftmq/proto"
)

// DefaultVhost is the vhost a write addresses when the request names none.
const DefaultVhost = "/"

// Service is the operations of one node that the operator front ends
// share: the gRPC Admin service, the management API and its console call
// it in process.
type Service struct {
	node        Node
	conns       Connections
	peers       Peers
	ownPool     *PeerPool // the pool New made, closed by Close
	peerTimeout time.Duration
	leaderWait  time.Duration
	log         *slog.Logger
	counters    func() NodeCounters
	resources   func() Resources
	environment func() []*proto.Setting
	intercept   func(*proto.Properties) (*proto.Properties, error)
}

// New returns the operations of the node in d.
func New(d Deps) *Service {
	s := &Service{
		node:        d.Node,
		conns:       d.Conns,
		peers:       d.Peers,
		peerTimeout: d.PeerTimeout,
		leaderWait:  d.LeaderWait,
		log:         d.Logger,
		counters:    d.Counters,
		resources:   d.Resources,
		environment: d.Environment,
		intercept:   d.Intercept,
	}
	if s.peers == nil {
		s.ownPool = NewPeerPool()
		s.peers = s.ownPool
	}
	if s.peerTimeout <= 0 {
		s.peerTimeout = 2 * time.Second
	}
	if s.leaderWait <= 0 {
		s.leaderWait = 5 * time.Second
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.log = s.log.With("component", "api")
	return s
}

// Node is the node the operations act on.
func (s *Service) Node() Node { return s.node }

// Logger is the operations' logger.
func (s *Service) Logger() *slog.Logger { return s.log }

// NodeCounters reads this node's own AMQP counters (zeros without them).
func (s *Service) NodeCounters() NodeCounters {
	if s.counters == nil {
		return NodeCounters{}
	}
	return s.counters()
}

// Close closes the connections to peers the server opened itself (not
// those of a Peers given in Deps).
func (s *Service) Close() error {
	if s.ownPool == nil {
		return nil
	}
	return s.ownPool.Close()
}

// submit proposes cmd and turns a failure or a refused command into an
// *Error.
func (s *Service) submit(ctx context.Context, cmd *proto.Command) (*proto.Result, error) {
	r, err := s.node.Submit(ctx, cmd)
	if err != nil {
		return nil, nodeError(err, Unavailable, "submit")
	}
	if err := refusal(r); err != nil {
		return nil, err
	}
	return r, nil
}

func orDefaultVhost(v string) string {
	if v == "" {
		return DefaultVhost
	}
	return v
}

// ---- cluster ----

// ClusterStatus answers raftmq.v1.Admin's ClusterStatus.
func (s *Service) ClusterStatus(ctx context.Context, req *proto.ClusterStatusRequest) (*proto.ClusterStatusResponse, error) {
	local := func() (*proto.ClusterStatusResponse, error) { return s.clusterStatus(), nil }
	if !req.GetConsistent() {
		return local()
	}
	return onLeader(ctx, s, req, proto.AdminClient.ClusterStatus, local)
}

func (s *Service) clusterStatus() *proto.ClusterStatusResponse {
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
	s.node.LocalView(func(m State) { resp.ClockMs = m.Clock() })
	r := s.Resources()
	resp.Alarms, resp.DiskFree, resp.DiskFreeLimit = r.Alarms(), r.DiskFree, r.DiskFreeLimit
	resp.ClockProblem = ClockProblem(s.node)
	// The process's own figures, so any node's /api/nodes shows every
	// member's.
	resp.MemUsed, resp.MemLimit, resp.MemLimitRelative = r.MemoryUsed(), r.MemLimit, r.MemLimitRelative
	resp.FdUsed, resp.FdTotal, _ = procstat.FileDescriptors()
	resp.UptimeMs = procstat.Uptime().Milliseconds()
	resp.Version = version.String()
	resp.OsPid = int64(os.Getpid())
	resp.Processors = uint32(runtime.NumCPU())
	resp.Goroutines = uint64(runtime.NumGoroutine())
	return resp
}

// TransferLeadership answers raftmq.v1.Admin's TransferLeadership. A follower forwards it
// to the leader.
func (s *Service) TransferLeadership(ctx context.Context, req *proto.TransferLeadershipRequest) (*proto.TransferLeadershipResponse, error) {
	return onLeader(ctx, s, req, proto.AdminClient.TransferLeadership, func() (*proto.TransferLeadershipResponse, error) {
		if id := req.GetNodeId(); id != "" && !s.isMember(id) {
			return nil, fail(NotFound, "node %q is not a member", id)
		}
		self := s.node.NodeID()
		if req.GetNodeId() == self {
			return &proto.TransferLeadershipResponse{LeaderId: self}, nil
		}
		if err := s.node.TransferLeadership(ctx, req.GetNodeId()); err != nil {
			return nil, nodeError(err, Precondition, "transfer leadership")
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

func (s *Service) isMember(id string) bool {
	for _, m := range s.node.Members() {
		if m.GetId() == id {
			return true
		}
	}
	return false
}

// RemoveNode answers raftmq.v1.Admin's RemoveNode. A follower forwards it to the
// leader.
func (s *Service) RemoveNode(ctx context.Context, req *proto.RemoveNodeRequest) (*proto.RemoveNodeResponse, error) {
	if req.GetNodeId() == "" {
		return nil, fail(Invalid, "node id must not be empty")
	}
	return onLeader(ctx, s, req, proto.AdminClient.RemoveNode, func() (*proto.RemoveNodeResponse, error) {
		if !s.isMember(req.GetNodeId()) {
			return nil, fail(NotFound, "node %q is not a member", req.GetNodeId())
		}
		if err := s.node.RemoveNode(ctx, req.GetNodeId()); err != nil {
			return nil, nodeError(err, Precondition, "remove node")
		}
		return &proto.RemoveNodeResponse{}, nil
	})
}

// ---- queues and topology ----

// ListQueues answers raftmq.v1.Admin's ListQueues.
func (s *Service) ListQueues(ctx context.Context, req *proto.ListQueuesRequest) (*proto.ListQueuesResponse, error) {
	return read(ctx, s, req.GetConsistent(), req, proto.AdminClient.ListQueues, func(st State) *proto.ListQueuesResponse {
		qs := st.Queues(req.GetVhost())
		s.queueGroupNames(qs...)
		return &proto.ListQueuesResponse{Queues: qs}
	})
}

// GetQueue answers raftmq.v1.Admin's GetQueue.
func (s *Service) GetQueue(ctx context.Context, req *proto.GetQueueRequest) (*proto.QueueInfo, error) {
	vhost := orDefaultVhost(req.GetVhost())
	q, err := read(ctx, s, req.GetConsistent(), req, proto.AdminClient.GetQueue, func(st State) *proto.QueueInfo {
		q, ok := st.Queue(vhost, req.GetName())
		if !ok {
			return nil
		}
		s.queueGroupNames(q)
		return q
	})
	if err != nil {
		return nil, err
	}
	if q == nil {
		return nil, fail(NotFound, "no queue '%s' in vhost '%s'", req.GetName(), vhost)
	}
	return q, nil
}

// PurgeQueue answers raftmq.v1.Admin's PurgeQueue.
func (s *Service) PurgeQueue(ctx context.Context, req *proto.PurgeQueueRequest) (*proto.PurgeQueueResponse, error) {
	if req.GetName() == "" {
		return nil, fail(Invalid, "queue name must not be empty")
	}
	r, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_QueuePurge{QueuePurge: &proto.QueuePurge{
		Vhost: orDefaultVhost(req.GetVhost()), Name: req.GetName(),
	}}})
	if err != nil {
		return nil, err
	}
	return &proto.PurgeQueueResponse{MessageCount: r.GetMessageCount()}, nil
}

// DeleteQueue answers raftmq.v1.Admin's DeleteQueue.
func (s *Service) DeleteQueue(ctx context.Context, req *proto.DeleteQueueRequest) (*proto.DeleteQueueResponse, error) {
	if req.GetName() == "" {
		return nil, fail(Invalid, "queue name must not be empty")
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

// ListExchanges answers raftmq.v1.Admin's ListExchanges.
func (s *Service) ListExchanges(ctx context.Context, req *proto.ListRequest) (*proto.ListExchangesResponse, error) {
	return read(ctx, s, req.GetConsistent(), req, proto.AdminClient.ListExchanges, func(st State) *proto.ListExchangesResponse {
		return &proto.ListExchangesResponse{Exchanges: st.Exchanges(req.GetVhost())}
	})
}

// ListBindings answers raftmq.v1.Admin's ListBindings.
func (s *Service) ListBindings(ctx context.Context, req *proto.ListRequest) (*proto.ListBindingsResponse, error) {
	return read(ctx, s, req.GetConsistent(), req, proto.AdminClient.ListBindings, func(st State) *proto.ListBindingsResponse {
		return &proto.ListBindingsResponse{Bindings: st.Bindings(req.GetVhost())}
	})
}

// ListConsumers answers raftmq.v1.Admin's ListConsumers.
func (s *Service) ListConsumers(ctx context.Context, req *proto.ListRequest) (*proto.ListConsumersResponse, error) {
	return read(ctx, s, req.GetConsistent(), req, proto.AdminClient.ListConsumers, func(st State) *proto.ListConsumersResponse {
		return &proto.ListConsumersResponse{Consumers: st.Consumers(req.GetVhost())}
	})
}

// ListConnections answers raftmq.v1.Admin's ListConnections. Unless req.Local, it asks
// every other alive member for its connections in parallel (each within
// the peer timeout) and merges them with this node's; a peer that does not
// answer is logged and left out.
func (s *Service) ListConnections(ctx context.Context, req *proto.ListConnectionsRequest) (*proto.ListConnectionsResponse, error) {
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

// sortConnections orders connections by node, then id.
func sortConnections(cs []*proto.ConnectionInfo) {
	sort.Slice(cs, func(i, j int) bool {
		if cs[i].GetNode() != cs[j].GetNode() {
			return cs[i].GetNode() < cs[j].GetNode()
		}
		return cs[i].GetId() < cs[j].GetId()
	})
}

func (s *Service) localConnections() []*proto.ConnectionInfo {
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

// CloseConnection answers raftmq.v1.Admin's CloseConnection: it closes a connection of
// this node, or routes the call to the node named in the request.
func (s *Service) CloseConnection(ctx context.Context, req *proto.CloseConnectionRequest) (*proto.CloseConnectionResponse, error) {
	if req.GetId() == "" {
		return nil, fail(Invalid, "connection id must not be empty")
	}
	node := req.GetNode()
	if node == "" || node == s.node.NodeID() {
		if s.conns == nil || !s.conns.Close(req.GetId(), req.GetReason()) {
			return nil, fail(NotFound, "no connection %q on node %s", req.GetId(), s.node.NodeID())
		}
		return &proto.CloseConnectionResponse{}, nil
	}
	addr := s.memberAddr(node)
	if addr == "" {
		return nil, fail(NotFound, "node %q is not a member", node)
	}
	c, err := s.peers.Admin(addr)
	if err != nil {
		return nil, nodeError(err, Unavailable, "dial "+node)
	}
	r, err := c.CloseConnection(withCallerCredentials(ctx), req)
	return r, peerError(err)
}

// ---- policies ----

// SetPolicy answers raftmq.v1.Admin's SetPolicy. The definition is validated
// before anything goes into the log.
func (s *Service) SetPolicy(ctx context.Context, req *proto.SetPolicyRequest) (*proto.SetPolicyResponse, error) {
	applyTo := req.GetApplyTo()
	if applyTo == "" {
		applyTo = "all"
	}
	if err := validatePolicy(req.GetName(), req.GetPattern(), applyTo, req.GetDefinition()); err != nil {
		return nil, fail(Invalid, "%s", err)
	}
	if req.GetOperator() && req.GetDefinition().QueueLeaderLocator != nil {
		// Placement reads the queue's own policy only, as RabbitMQ's
		// operator policies have no such key.
		return nil, fail(Invalid, "queue-leader-locator is not an operator policy key")
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

// ClearPolicy answers raftmq.v1.Admin's ClearPolicy.
func (s *Service) ClearPolicy(ctx context.Context, req *proto.ClearPolicyRequest) (*proto.ClearPolicyResponse, error) {
	if req.GetName() == "" {
		return nil, fail(Invalid, "policy name must not be empty")
	}
	_, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_PolicyClear{PolicyClear: &proto.PolicyClear{
		Vhost: orDefaultVhost(req.GetVhost()), Name: req.GetName(), Operator: req.GetOperator(),
	}}})
	if err != nil {
		return nil, err
	}
	return &proto.ClearPolicyResponse{}, nil
}

// ListPolicies answers raftmq.v1.Admin's ListPolicies.
func (s *Service) ListPolicies(ctx context.Context, req *proto.ListPoliciesRequest) (*proto.ListPoliciesResponse, error) {
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
		return nil, fail(Internal, "password salt: %v", err)
	}
	return fsm.HashPassword(salt, password), nil
}

// user returns the named user from the local state.
func (s *Service) user(name string) (*proto.UserInfo, bool) {
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

// AddUser answers raftmq.v1.Admin's AddUser.
func (s *Service) AddUser(ctx context.Context, req *proto.AddUserRequest) (*proto.AddUserResponse, error) {
	if req.GetName() == "" {
		return nil, fail(Invalid, "user name must not be empty")
	}
	if _, ok := s.user(req.GetName()); ok {
		return nil, fail(Exists, "user '%s' already exists", req.GetName())
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

// DeleteUser answers raftmq.v1.Admin's DeleteUser.
func (s *Service) DeleteUser(ctx context.Context, req *proto.DeleteUserRequest) (*proto.DeleteUserResponse, error) {
	if req.GetName() == "" {
		return nil, fail(Invalid, "user name must not be empty")
	}
	if _, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_UserDelete{UserDelete: &proto.UserDelete{Name: req.GetName()}}}); err != nil {
		return nil, err
	}
	return &proto.DeleteUserResponse{}, nil
}

// ChangePassword answers raftmq.v1.Admin's ChangePassword. It rewrites the user with a
// new salted hash and its current tags.
func (s *Service) ChangePassword(ctx context.Context, req *proto.ChangePasswordRequest) (*proto.ChangePasswordResponse, error) {
	u, ok := s.user(req.GetName())
	if !ok {
		return nil, fail(NotFound, "no user '%s'", req.GetName())
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

// SetUserTags answers raftmq.v1.Admin's SetUserTags. It rewrites the user with its
// stored password hash.
func (s *Service) SetUserTags(ctx context.Context, req *proto.SetUserTagsRequest) (*proto.SetUserTagsResponse, error) {
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
		return nil, fail(NotFound, "no user '%s'", req.GetName())
	}
	if _, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_UserPut{UserPut: &proto.UserPut{
		Name: req.GetName(), PasswordHash: hash, HashAlgorithm: algorithm, Tags: req.GetTags(),
	}}}); err != nil {
		return nil, err
	}
	return &proto.SetUserTagsResponse{}, nil
}

// ListUsers answers raftmq.v1.Admin's ListUsers.
func (s *Service) ListUsers(ctx context.Context, req *proto.ListRequest) (*proto.ListUsersResponse, error) {
	return read(ctx, s, req.GetConsistent(), req, proto.AdminClient.ListUsers, func(st State) *proto.ListUsersResponse {
		return &proto.ListUsersResponse{Users: st.Users()}
	})
}

// SetPermissions answers raftmq.v1.Admin's SetPermissions.
func (s *Service) SetPermissions(ctx context.Context, req *proto.SetPermissionsRequest) (*proto.SetPermissionsResponse, error) {
	if req.GetUser() == "" {
		return nil, fail(Invalid, "user name must not be empty")
	}
	for _, p := range [][2]string{{"configure", req.GetConfigure()}, {"write", req.GetWrite()}, {"read", req.GetRead()}} {
		if _, err := regexp.Compile(p[1]); err != nil {
			return nil, fail(Invalid, "%s pattern %q does not compile: %v", p[0], p[1], err)
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

// ClearPermissions answers raftmq.v1.Admin's ClearPermissions.
func (s *Service) ClearPermissions(ctx context.Context, req *proto.ClearPermissionsRequest) (*proto.ClearPermissionsResponse, error) {
	if req.GetUser() == "" {
		return nil, fail(Invalid, "user name must not be empty")
	}
	if _, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_PermissionClear{PermissionClear: &proto.PermissionClear{
		User: req.GetUser(), Vhost: orDefaultVhost(req.GetVhost()),
	}}}); err != nil {
		return nil, err
	}
	return &proto.ClearPermissionsResponse{}, nil
}

// ListPermissions answers raftmq.v1.Admin's ListPermissions. A vhost in the request
// keeps only that vhost's permissions.
func (s *Service) ListPermissions(ctx context.Context, req *proto.ListRequest) (*proto.ListPermissionsResponse, error) {
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

// AddVhost answers raftmq.v1.Admin's AddVhost.
func (s *Service) AddVhost(ctx context.Context, req *proto.AddVhostRequest) (*proto.AddVhostResponse, error) {
	if req.GetName() == "" {
		return nil, fail(Invalid, "vhost name must not be empty")
	}
	if _, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{
		Name: req.GetName(), Description: req.GetDescription(),
	}}}); err != nil {
		return nil, err
	}
	return &proto.AddVhostResponse{}, nil
}

// DeleteVhost answers raftmq.v1.Admin's DeleteVhost.
func (s *Service) DeleteVhost(ctx context.Context, req *proto.DeleteVhostRequest) (*proto.DeleteVhostResponse, error) {
	if req.GetName() == "" {
		return nil, fail(Invalid, "vhost name must not be empty")
	}
	if _, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_VhostDelete{VhostDelete: &proto.VhostDelete{Name: req.GetName()}}}); err != nil {
		return nil, err
	}
	return &proto.DeleteVhostResponse{}, nil
}

// ListVhosts answers raftmq.v1.Admin's ListVhosts.
func (s *Service) ListVhosts(ctx context.Context, req *proto.ListRequest) (*proto.ListVhostsResponse, error) {
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

// Environment answers raftmq.v1.Admin's Environment: this node's
// settings, as Deps.Environment gives them.
func (s *Service) Environment(_ context.Context, _ *proto.EnvironmentRequest) (*proto.EnvironmentResponse, error) {
	resp := &proto.EnvironmentResponse{NodeId: s.node.NodeID()}
	if s.environment != nil {
		resp.Settings = s.environment()
	}
	return resp, nil
}

// Digest answers raftmq.v1.Admin's Digest: this node's state digest.
func (s *Service) Digest(_ context.Context, req *proto.DigestRequest) (*proto.DigestResponse, error) {
	resp := &proto.DigestResponse{NodeId: s.node.NodeID()}
	if req.GetGroup() != "" {
		d, applied, ok := s.node.GroupDigest(req.GetGroup())
		if !ok {
			return nil, fail(NotFound, "this node runs no queue group %q", req.GetGroup())
		}
		resp.Digest, resp.AppliedIndex = hex.EncodeToString(d[:]), applied
		return resp, nil
	}
	s.node.View(func(st State) {
		d := st.Digest()
		resp.Digest = hex.EncodeToString(d[:])
		resp.AppliedIndex = st.AppliedIndex()
	})
	return resp, nil
}

// Resources reads this node's resource alarms (none without a reader).
func (s *Service) Resources() Resources {
	if s.resources == nil {
		return Resources{}
	}
	return s.resources()
}

// NodeStatuses is every alive member's ClusterStatus, by node id: this
// node's own, the others' asked in parallel (each within the peer
// timeout). A member that does not answer is left out and logged, as
// ListConnections leaves it out.
func (s *Service) NodeStatuses(ctx context.Context) map[string]*proto.ClusterStatusResponse {
	out := map[string]*proto.ClusterStatusResponse{s.node.NodeID(): s.clusterStatus()}
	askPeers(ctx, s, "node status", func(ctx context.Context, c proto.AdminClient) (*proto.ClusterStatusResponse, error) {
		return c.ClusterStatus(ctx, &proto.ClusterStatusRequest{})
	}, func(id string, r *proto.ClusterStatusResponse) { out[id] = r })
	return out
}
