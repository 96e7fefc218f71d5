// Package opstest has in-memory fakes of the node that package ops sees,
// for the tests of ops and of its front ends.
package opstest

import (
	"context"
	"crypto/sha256"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gproto "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// State is an in-memory ops.State for tests.
type State struct {
	QueueList    []*proto.QueueInfo
	ExchangeList []*proto.ExchangeInfo
	BindingList  []*proto.BindingInfo
	ConsumerList []*proto.ConsumerInfo
	PolicyList   []*proto.PolicyInfo
	UserList     []*proto.UserInfo
	Hashes       map[string][]byte
	PermList     []*proto.PermissionInfo
	VhostList    []*proto.VhostInfo
	LimitList    []*proto.VhostLimitsInfo
	Applied      uint64
	ClockMs      int64
	Ready        bool
	// DelayedList are the delayed messages, earliest due first.
	DelayedList  []*proto.DelayedMessageInfo
	ReleaseStats fsm.ReleaseStats
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

func (f *State) Queues(v string) []*proto.QueueInfo { return byVhost(f.QueueList, v) }
func (f *State) Queue(v, n string) (*proto.QueueInfo, bool) {
	for _, q := range f.QueueList {
		if q.GetVhost() == v && q.GetName() == n {
			return q, true
		}
	}
	return nil, false
}
func (f *State) Exchanges(v string) []*proto.ExchangeInfo { return byVhost(f.ExchangeList, v) }
func (f *State) Bindings(v string) []*proto.BindingInfo   { return byVhost(f.BindingList, v) }
func (f *State) Consumers(v string) []*proto.ConsumerInfo { return byVhost(f.ConsumerList, v) }
func (f *State) Policies(v string, op bool) []*proto.PolicyInfo {
	var out []*proto.PolicyInfo
	for _, p := range byVhost(f.PolicyList, v) {
		if p.GetOperator() == op {
			out = append(out, p)
		}
	}
	return out
}
func (f *State) Users() []*proto.UserInfo             { return f.UserList }
func (f *State) Permissions() []*proto.PermissionInfo { return f.PermList }
func (f *State) Vhosts() []*proto.VhostInfo           { return f.VhostList }
func (f *State) VhostLimits(v string) []*proto.VhostLimitsInfo {
	return byVhost(f.LimitList, v)
}
func (f *State) Digest() [32]byte               { return sha256.Sum256([]byte{byte(f.Applied)}) }
func (f *State) AppliedIndex() uint64           { return f.Applied }
func (f *State) Clock() int64                   { return f.ClockMs }
func (f *State) Initialized() bool              { return f.Ready }
func (f *State) Stats() fsm.Stats               { return fsm.Stats{} }
func (f *State) QueueCounts() []fsm.QueueCounts { return nil }
func (f *State) Releases() fsm.ReleaseStats     { return f.ReleaseStats }
func (f *State) Delayed(v, x string, limit int) []*proto.DelayedMessageInfo {
	var out []*proto.DelayedMessageInfo
	for _, d := range byVhost(f.DelayedList, v) {
		if len(out) < limit && (x == "" || d.GetExchange() == x) {
			out = append(out, d)
		}
	}
	return out
}
func (f *State) UserPasswordHash(n string) ([]byte, string, bool) {
	h, ok := f.Hashes[n]
	return h, "rabbit_password_hashing_sha256", ok
}

// Node is an ops.Node whose log is a list of submitted commands. Mu guards
// every field; a test that changes them holds it.
type Node struct {
	Mu       sync.Mutex
	ID       string
	LeaderID string
	// LeaderAsked counts the calls of Leader.
	LeaderAsked int
	State       *State
	MemberList  []*proto.NodeStatus
	Raft        ops.RaftStats
	Submitted   []*proto.Command
	// Result answers a submitted command; nil means success.
	Result      func(*proto.Command) *proto.Result
	Transferred []string
	Removed     []string
	// GroupList is what Groups returns; nil is one metadata group of the
	// voters of MemberList, led by LeaderID, with Raft's figures.
	GroupList []ops.GroupStatus
	// Grown and Shrunk record GrowGroups' and ShrinkGroups' node ids;
	// Changes is what they return.
	Grown, Shrunk []string
	Changes       []ops.GroupChange
	// Refused is why the node refuses clients (Refusing), "" when it
	// takes them.
	Refused string
}

// Refusing implements ops.ClientRefuser.
func (n *Node) Refusing() string {
	n.Mu.Lock()
	defer n.Mu.Unlock()
	return n.Refused
}

// NewNode is the fake node id, leading, its defaults applied.
func NewNode(id string) *Node {
	return &Node{ID: id, LeaderID: id, State: &State{Ready: true}}
}

func (n *Node) NodeID() string { return n.ID }
func (n *Node) IsLeader() bool {
	n.Mu.Lock()
	defer n.Mu.Unlock()
	return n.LeaderID == n.ID
}
func (n *Node) Leader() (string, string) {
	n.Mu.Lock()
	defer n.Mu.Unlock()
	n.LeaderAsked++
	return n.LeaderID, n.LeaderID + ":raft"
}

// SetLeader makes id the leader this node knows.
func (n *Node) SetLeader(id string) {
	n.Mu.Lock()
	n.LeaderID = id
	n.Mu.Unlock()
}
func (n *Node) Submit(_ context.Context, c *proto.Command) (*proto.Result, error) {
	n.Mu.Lock()
	defer n.Mu.Unlock()
	n.Submitted = append(n.Submitted, c)
	if n.Result != nil {
		if r := n.Result(c); r != nil {
			return r, nil
		}
	}
	return &proto.Result{}, nil
}

// LastSubmitted is the last command submitted; the test fails without one.
func (n *Node) LastSubmitted(t *testing.T) *proto.Command {
	t.Helper()
	n.Mu.Lock()
	defer n.Mu.Unlock()
	if len(n.Submitted) == 0 {
		t.Fatal("nothing submitted")
	}
	return n.Submitted[len(n.Submitted)-1]
}

// SubmittedCount is how many commands were submitted.
func (n *Node) SubmittedCount() int {
	n.Mu.Lock()
	defer n.Mu.Unlock()
	return len(n.Submitted)
}
func (n *Node) View(fn func(ops.State)) {
	n.Mu.Lock()
	defer n.Mu.Unlock()
	fn(n.State)
}

// LocalView implements ops.Node: a fake node's state is all local.
func (n *Node) LocalView(fn func(ops.State)) { n.View(fn) }

// Update changes the state under the node's lock.
func (n *Node) Update(fn func(*State)) {
	n.Mu.Lock()
	defer n.Mu.Unlock()
	fn(n.State)
}
func (n *Node) RaftStats() ops.RaftStats {
	n.Mu.Lock()
	defer n.Mu.Unlock()
	return n.Raft
}
func (n *Node) Members() []*proto.NodeStatus {
	n.Mu.Lock()
	defer n.Mu.Unlock()
	return n.MemberList
}
func (n *Node) TransferLeadership(_ context.Context, id string) error {
	n.Mu.Lock()
	defer n.Mu.Unlock()
	n.Transferred = append(n.Transferred, id)
	if id == "" {
		id = "other"
	}
	n.LeaderID = id
	return nil
}
func (n *Node) RemoveNode(_ context.Context, id string) error {
	n.Mu.Lock()
	defer n.Mu.Unlock()
	n.Removed = append(n.Removed, id)
	return nil
}

func (n *Node) Groups() []ops.GroupStatus {
	n.Mu.Lock()
	defer n.Mu.Unlock()
	if n.GroupList != nil {
		return n.GroupList
	}
	g := ops.GroupStatus{Name: cluster.MetadataGroupName, Leader: n.LeaderID, State: n.Raft.State, Term: n.Raft.Term,
		CommitIndex: n.Raft.CommitIndex, LastApplied: n.Raft.AppliedIndex, LastLogIndex: n.Raft.LastLogIndex}
	for _, m := range n.MemberList {
		if strings.EqualFold(m.GetSuffrage(), "voter") {
			g.Members = append(g.Members, ops.GroupMember{ID: m.GetId(), Voter: true,
				Online: m.GetHealth() == "" || m.GetHealth() == "alive"})
		}
	}
	slices.SortFunc(g.Members, func(a, b ops.GroupMember) int { return strings.Compare(a.ID, b.ID) })
	return []ops.GroupStatus{g}
}

// GroupDigest implements ops.Node: a fake node runs no queue group.
func (n *Node) GroupDigest(string) ([32]byte, uint64, bool) { return [32]byte{}, 0, false }

func (n *Node) GrowGroups(_ context.Context, id string, _ bool) ([]ops.GroupChange, error) {
	n.Mu.Lock()
	defer n.Mu.Unlock()
	n.Grown = append(n.Grown, id)
	return n.Changes, nil
}
func (n *Node) ShrinkGroups(_ context.Context, id string) ([]ops.GroupChange, error) {
	n.Mu.Lock()
	defer n.Mu.Unlock()
	n.Shrunk = append(n.Shrunk, id)
	return n.Changes, nil
}
func (n *Node) RebalanceGroups(context.Context) (map[string]int, error) {
	led := map[string]int{}
	for _, g := range n.Groups() {
		if g.Leader != "" {
			led[g.Leader]++
		}
	}
	return led, nil
}

// Conns is an ops.Connections over a fixed list.
type Conns struct {
	Mu     sync.Mutex
	Open   []*proto.ConnectionInfo
	Closed []string
}

func (c *Conns) List() []*proto.ConnectionInfo {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	out := make([]*proto.ConnectionInfo, 0, len(c.Open))
	for _, x := range c.Open {
		out = append(out, gproto.Clone(x).(*proto.ConnectionInfo))
	}
	return out
}
func (c *Conns) Close(id, reason string) bool {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	for _, x := range c.Open {
		if x.GetId() == id {
			c.Closed = append(c.Closed, id+":"+reason)
			return true
		}
	}
	return false
}

// Context is a test's context, cancelled after 10 seconds or at its end.
func Context(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// ResourceBox is a node's resources a test changes: R at the start, then
// through Set; Get is the reader for ops.Deps and the metrics.
type ResourceBox struct {
	mu sync.Mutex
	R  ops.Resources
}

func (b *ResourceBox) Get() ops.Resources { b.mu.Lock(); defer b.mu.Unlock(); return b.R }
func (b *ResourceBox) Set(r ops.Resources) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.R = r
}

// AuthNode is a fake node with three users: root (administrator), watcher
// (monitoring) and joe (no tags), each with password "pw-<name>", and the
// members n1 and n2.
func AuthNode() *Node {
	n := NewNode("n1")
	n.Update(func(s *State) {
		s.Hashes = map[string][]byte{}
		for name, tags := range map[string][]string{"root": {"administrator"}, "watcher": {"monitoring"}, "joe": nil} {
			s.UserList = append(s.UserList, &proto.UserInfo{Name: name, Tags: tags})
			s.Hashes[name] = fsm.HashPassword([]byte{1, 2, 3, 4}, "pw-"+name)
		}
	})
	n.MemberList = []*proto.NodeStatus{{Id: "n1"}, {Id: "n2"}}
	return n
}
