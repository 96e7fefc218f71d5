package api

import (
	"context"
	"crypto/sha256"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	gproto "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// fakeState is an in-memory ops.State for tests.
type fakeState struct {
	queues      []*proto.QueueInfo
	exchanges   []*proto.ExchangeInfo
	bindings    []*proto.BindingInfo
	consumers   []*proto.ConsumerInfo
	policies    []*proto.PolicyInfo
	users       []*proto.UserInfo
	hashes      map[string][]byte
	perms       []*proto.PermissionInfo
	vhosts      []*proto.VhostInfo
	applied     uint64
	clock       int64
	initialized bool
}

func byVhost[T interface{ GetVhost() string }](all []T, vhost string) []T {
	var out []T
	for _, x := range all {
		if vhost == "" || x.GetVhost() == vhost {
			out = append(out, x)
		}
	}
	return out
}

func (f *fakeState) Queues(v string) []*proto.QueueInfo { return byVhost(f.queues, v) }
func (f *fakeState) Queue(v, n string) (*proto.QueueInfo, bool) {
	for _, q := range f.queues {
		if q.GetVhost() == v && q.GetName() == n {
			return q, true
		}
	}
	return nil, false
}
func (f *fakeState) Exchanges(v string) []*proto.ExchangeInfo { return byVhost(f.exchanges, v) }
func (f *fakeState) Bindings(v string) []*proto.BindingInfo   { return byVhost(f.bindings, v) }
func (f *fakeState) Consumers(v string) []*proto.ConsumerInfo { return byVhost(f.consumers, v) }
func (f *fakeState) Policies(v string, op bool) []*proto.PolicyInfo {
	var out []*proto.PolicyInfo
	for _, p := range byVhost(f.policies, v) {
		if p.GetOperator() == op {
			out = append(out, p)
		}
	}
	return out
}
func (f *fakeState) Users() []*proto.UserInfo             { return f.users }
func (f *fakeState) Permissions() []*proto.PermissionInfo { return f.perms }
func (f *fakeState) Vhosts() []*proto.VhostInfo           { return f.vhosts }
func (f *fakeState) Digest() [32]byte                     { return sha256.Sum256([]byte{byte(f.applied)}) }
func (f *fakeState) AppliedIndex() uint64                 { return f.applied }
func (f *fakeState) Clock() int64                         { return f.clock }
func (f *fakeState) Initialized() bool                    { return f.initialized }
func (f *fakeState) Stats() fsm.Stats                     { return fsm.Stats{} }
func (f *fakeState) QueueCounts() []fsm.QueueCounts       { return nil }
func (f *fakeState) UserPasswordHash(n string) ([]byte, string, bool) {
	h, ok := f.hashes[n]
	return h, "rabbit_password_hashing_sha256", ok
}

// fakeNode is a ops.Node whose log is a list of submitted commands.
type fakeNode struct {
	mu        sync.Mutex
	id        string
	leaderID  string
	state     *fakeState
	members   []*proto.NodeStatus
	stats     ops.RaftStats
	submitted []*proto.Command
	// result answers a submitted command; nil means success.
	result      func(*proto.Command) *proto.Result
	transferred []string
	removed     []string
}

func newFakeNode(id string) *fakeNode {
	return &fakeNode{id: id, leaderID: id, state: &fakeState{initialized: true}}
}

func (n *fakeNode) NodeID() string { return n.id }
func (n *fakeNode) IsLeader() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leaderID == n.id
}
func (n *fakeNode) Leader() (string, string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leaderID, n.leaderID + ":raft"
}
func (n *fakeNode) setLeader(id string) {
	n.mu.Lock()
	n.leaderID = id
	n.mu.Unlock()
}
func (n *fakeNode) Submit(_ context.Context, c *proto.Command) (*proto.Result, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.submitted = append(n.submitted, c)
	if n.result != nil {
		if r := n.result(c); r != nil {
			return r, nil
		}
	}
	return &proto.Result{}, nil
}
func (n *fakeNode) lastSubmitted(t *testing.T) *proto.Command {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.submitted) == 0 {
		t.Fatal("nothing submitted")
	}
	return n.submitted[len(n.submitted)-1]
}
func (n *fakeNode) submittedCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.submitted)
}
func (n *fakeNode) View(fn func(ops.State)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	fn(n.state)
}
func (n *fakeNode) update(fn func(*fakeState)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	fn(n.state)
}
func (n *fakeNode) RaftStats() ops.RaftStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}
func (n *fakeNode) Members() []*proto.NodeStatus {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.members
}
func (n *fakeNode) TransferLeadership(_ context.Context, id string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.transferred = append(n.transferred, id)
	if id == "" {
		id = "other"
	}
	n.leaderID = id
	return nil
}
func (n *fakeNode) RemoveNode(_ context.Context, id string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.removed = append(n.removed, id)
	return nil
}

// fakeConns is a ops.Connections over a fixed list.
type fakeConns struct {
	mu     sync.Mutex
	list   []*proto.ConnectionInfo
	closed []string
}

func (c *fakeConns) List() []*proto.ConnectionInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*proto.ConnectionInfo, 0, len(c.list))
	for _, x := range c.list {
		out = append(out, gproto.Clone(x).(*proto.ConnectionInfo))
	}
	return out
}
func (c *fakeConns) Close(id, reason string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range c.list {
		if x.GetId() == id {
			c.closed = append(c.closed, id+":"+reason)
			return true
		}
	}
	return false
}

// testNode is an AdminServer on a loopback gRPC listener.
type testNode struct {
	node   *fakeNode
	conns  *fakeConns
	addr   string
	client proto.AdminClient
}

// startNode serves an AdminServer for node on loopback and returns a
// client of it.
func startNode(t *testing.T, node *fakeNode, conns *fakeConns) *testNode {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pool := ops.NewPeerPool()
	t.Cleanup(func() { _ = pool.Close() })
	srv := grpc.NewServer()
	deps := ops.Deps{Node: node, Peers: pool}
	if conns != nil {
		deps.Conns = conns
	}
	proto.RegisterAdminServer(srv, NewAdminServer(ops.New(deps)))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return &testNode{node: node, conns: conns, addr: lis.Addr().String(), client: proto.NewAdminClient(cc)}
}

// setMembers gives every node the same member list.
func setMembers(nodes ...*testNode) {
	var ms []*proto.NodeStatus
	for _, n := range nodes {
		ms = append(ms, &proto.NodeStatus{Id: n.node.id, GrpcAddr: n.addr, Health: "alive", Suffrage: "voter"})
	}
	for _, n := range nodes {
		n.node.mu.Lock()
		n.node.members = ms
		n.node.mu.Unlock()
	}
}
