package grpcadmin

import (
	"bytes"
	"context"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	protobuf "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/api/ops/opstest"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

func wantCode(t *testing.T, err error, c codes.Code, substr string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != c {
		t.Fatalf("got %v (%v), want code %v", st.Code(), err, c)
	}
	if !strings.Contains(st.Message(), substr) {
		t.Fatalf("message %q does not contain %q", st.Message(), substr)
	}
}

func i64(v int64) *int64   { return &v }
func str(v string) *string { return &v }

func TestAdmin_Reads(t *testing.T) {
	n := opstest.NewNode("n1")
	n.State.QueueList = []*proto.QueueInfo{{Vhost: "/", Name: "q1", Ready: 3}, {Vhost: "v2", Name: "q2"}}
	n.State.ExchangeList = []*proto.ExchangeInfo{{Vhost: "/", Name: "x", Type: "direct"}}
	n.State.BindingList = []*proto.BindingInfo{{Vhost: "/", Source: "x", Destination: "q1"}}
	n.State.ConsumerList = []*proto.ConsumerInfo{{Vhost: "v2", Queue: "q2"}}
	n.State.PolicyList = []*proto.PolicyInfo{{Vhost: "/", Name: "p"}, {Vhost: "/", Name: "op", Operator: true}}
	n.State.UserList = []*proto.UserInfo{{Name: "guest", Tags: []string{"administrator"}}}
	n.State.PermList = []*proto.PermissionInfo{{User: "guest", Vhost: "/"}, {User: "guest", Vhost: "v2"}}
	n.State.VhostList = []*proto.VhostInfo{{Name: "/"}, {Name: "v2"}}
	n.State.Applied = 42
	n.State.ClockMs = 1700
	n.Raft = ops.RaftStats{State: "Leader", Term: 3, CommitIndex: 42, AppliedIndex: 42, LastLogIndex: 43}
	tn := startNode(t, n, nil)
	setMembers(tn)
	ctx := opstest.Context(t)
	c := tn.client

	qs, err := c.ListQueues(ctx, &proto.ListQueuesRequest{})
	if err != nil || len(qs.GetQueues()) != 2 {
		t.Fatalf("ListQueues all: %v %v", qs, err)
	}
	qs, err = c.ListQueues(ctx, &proto.ListQueuesRequest{Vhost: "v2"})
	if err != nil || len(qs.GetQueues()) != 1 || qs.GetQueues()[0].GetName() != "q2" {
		t.Fatalf("ListQueues v2: %v %v", qs, err)
	}
	q, err := c.GetQueue(ctx, &proto.GetQueueRequest{Name: "q1"})
	if err != nil || q.GetReady() != 3 {
		t.Fatalf("GetQueue: %v %v", q, err)
	}
	_, err = c.GetQueue(ctx, &proto.GetQueueRequest{Name: "nope"})
	wantCode(t, err, codes.NotFound, "nope")

	xs, err := c.ListExchanges(ctx, &proto.ListRequest{Vhost: "/"})
	if err != nil || len(xs.GetExchanges()) != 1 {
		t.Fatalf("ListExchanges: %v %v", xs, err)
	}
	bs, err := c.ListBindings(ctx, &proto.ListRequest{})
	if err != nil || len(bs.GetBindings()) != 1 {
		t.Fatalf("ListBindings: %v %v", bs, err)
	}
	cs, err := c.ListConsumers(ctx, &proto.ListRequest{Vhost: "/"})
	if err != nil || len(cs.GetConsumers()) != 0 {
		t.Fatalf("ListConsumers: %v %v", cs, err)
	}
	ps, err := c.ListPolicies(ctx, &proto.ListPoliciesRequest{Vhost: "/", Operator: true})
	if err != nil || len(ps.GetPolicies()) != 1 || ps.GetPolicies()[0].GetName() != "op" {
		t.Fatalf("ListPolicies: %v %v", ps, err)
	}
	us, err := c.ListUsers(ctx, &proto.ListRequest{})
	if err != nil || len(us.GetUsers()) != 1 {
		t.Fatalf("ListUsers: %v %v", us, err)
	}
	pm, err := c.ListPermissions(ctx, &proto.ListRequest{Vhost: "v2"})
	if err != nil || len(pm.GetPermissions()) != 1 || pm.GetPermissions()[0].GetVhost() != "v2" {
		t.Fatalf("ListPermissions: %v %v", pm, err)
	}
	vs, err := c.ListVhosts(ctx, &proto.ListRequest{})
	if err != nil || len(vs.GetVhosts()) != 2 {
		t.Fatalf("ListVhosts: %v %v", vs, err)
	}
	d, err := c.Digest(ctx, &proto.DigestRequest{})
	want := n.State.Digest()
	if err != nil || d.GetDigest() != hex.EncodeToString(want[:]) || d.GetAppliedIndex() != 42 || d.GetNodeId() != "n1" {
		t.Fatalf("Digest: %v %v", d, err)
	}
	cst, err := c.ClusterStatus(ctx, &proto.ClusterStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if cst.GetNodeId() != "n1" || cst.GetLeaderId() != "n1" || cst.GetRaftState() != "Leader" || cst.GetTerm() != 3 ||
		cst.GetLastLogIndex() != 43 || cst.GetClockMs() != 1700 || len(cst.GetNodes()) != 1 {
		t.Fatalf("ClusterStatus: %v", cst)
	}
}

func TestAdmin_WritesBecomeCommands(t *testing.T) {
	n := opstest.NewNode("n1")
	n.State.UserList = []*proto.UserInfo{{Name: "bob", Tags: []string{"monitoring"}}}
	n.State.Hashes = map[string][]byte{"bob": []byte("stored-hash")}
	n.Result = func(c *proto.Command) *proto.Result {
		if c.GetQueuePurge() != nil || c.GetQueueDelete() != nil {
			return &proto.Result{MessageCount: 7}
		}
		return nil
	}
	tn := startNode(t, n, nil)
	ctx := opstest.Context(t)
	c := tn.client

	cases := []struct {
		name string
		call func() error
		want *proto.Command
	}{
		{"purge", func() error {
			r, err := c.PurgeQueue(ctx, &proto.PurgeQueueRequest{Name: "q"})
			if err == nil && r.GetMessageCount() != 7 {
				t.Errorf("purge count %d", r.GetMessageCount())
			}
			return err
		}, &proto.Command{Cmd: &proto.Command_QueuePurge{QueuePurge: &proto.QueuePurge{Vhost: "/", Name: "q"}}}},
		{"delete", func() error {
			r, err := c.DeleteQueue(ctx, &proto.DeleteQueueRequest{Vhost: "v", Name: "q", IfUnused: true, IfEmpty: true})
			if err == nil && r.GetMessageCount() != 7 {
				t.Errorf("delete count %d", r.GetMessageCount())
			}
			return err
		}, &proto.Command{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{Vhost: "v", Name: "q", IfUnused: true, IfEmpty: true}}}},
		{"set policy", func() error {
			_, err := c.SetPolicy(ctx, &proto.SetPolicyRequest{Name: "ttl", Pattern: "^a", ApplyTo: "queues", Priority: 2,
				Definition: &proto.PolicyDefinition{MessageTtl: i64(1000), DeadLetterExchange: str("dlx")}})
			return err
		}, &proto.Command{Cmd: &proto.Command_PolicySet{PolicySet: &proto.PolicySet{Vhost: "/", Name: "ttl", Pattern: "^a", ApplyTo: "queues", Priority: 2,
			Definition: &proto.PolicyDefinition{MessageTtl: i64(1000), DeadLetterExchange: str("dlx")}}}}},
		{"set operator policy default apply-to", func() error {
			_, err := c.SetPolicy(ctx, &proto.SetPolicyRequest{Vhost: "v", Name: "cap", Pattern: ".*", Operator: true,
				Definition: &proto.PolicyDefinition{MaxLength: i64(10)}})
			return err
		}, &proto.Command{Cmd: &proto.Command_PolicySet{PolicySet: &proto.PolicySet{Vhost: "v", Name: "cap", Pattern: ".*", ApplyTo: "all", Operator: true,
			Definition: &proto.PolicyDefinition{MaxLength: i64(10)}}}}},
		{"clear policy", func() error {
			_, err := c.ClearPolicy(ctx, &proto.ClearPolicyRequest{Name: "ttl", Operator: true})
			return err
		}, &proto.Command{Cmd: &proto.Command_PolicyClear{PolicyClear: &proto.PolicyClear{Vhost: "/", Name: "ttl", Operator: true}}}},
		{"delete user", func() error {
			_, err := c.DeleteUser(ctx, &proto.DeleteUserRequest{Name: "bob"})
			return err
		}, &proto.Command{Cmd: &proto.Command_UserDelete{UserDelete: &proto.UserDelete{Name: "bob"}}}},
		{"set user tags", func() error {
			_, err := c.SetUserTags(ctx, &proto.SetUserTagsRequest{Name: "bob", Tags: []string{"administrator"}})
			return err
		}, &proto.Command{Cmd: &proto.Command_UserPut{UserPut: &proto.UserPut{Name: "bob", PasswordHash: []byte("stored-hash"),
			HashAlgorithm: fsm.PasswordHashAlgorithm, Tags: []string{"administrator"}}}}},
		{"set permissions", func() error {
			_, err := c.SetPermissions(ctx, &proto.SetPermissionsRequest{User: "bob", Configure: ".*", Write: "^a", Read: ""})
			return err
		}, &proto.Command{Cmd: &proto.Command_PermissionSet{PermissionSet: &proto.PermissionSet{User: "bob", Vhost: "/", Configure: ".*", Write: "^a"}}}},
		{"clear permissions", func() error {
			_, err := c.ClearPermissions(ctx, &proto.ClearPermissionsRequest{User: "bob", Vhost: "v"})
			return err
		}, &proto.Command{Cmd: &proto.Command_PermissionClear{PermissionClear: &proto.PermissionClear{User: "bob", Vhost: "v"}}}},
		{"add vhost", func() error {
			_, err := c.AddVhost(ctx, &proto.AddVhostRequest{Name: "v", Description: "d"})
			return err
		}, &proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "v", Description: "d"}}}},
		{"delete vhost", func() error {
			_, err := c.DeleteVhost(ctx, &proto.DeleteVhostRequest{Name: "v"})
			return err
		}, &proto.Command{Cmd: &proto.Command_VhostDelete{VhostDelete: &proto.VhostDelete{Name: "v"}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); err != nil {
				t.Fatal(err)
			}
			if got := n.LastSubmitted(t); !protobuf.Equal(got, tc.want) {
				t.Fatalf("submitted %v, want %v", got, tc.want)
			}
		})
	}
}

func TestAdmin_Passwords(t *testing.T) {
	n := opstest.NewNode("n1")
	tn := startNode(t, n, nil)
	ctx := opstest.Context(t)

	if _, err := tn.client.AddUser(ctx, &proto.AddUserRequest{Name: "alice", Password: "s3cret", Tags: []string{"management"}}); err != nil {
		t.Fatal(err)
	}
	first := n.LastSubmitted(t).GetUserPut()
	if first.GetName() != "alice" || first.GetHashAlgorithm() != fsm.PasswordHashAlgorithm || len(first.GetTags()) != 1 {
		t.Fatalf("UserPut %v", first)
	}
	raw, _ := protobuf.Marshal(n.LastSubmitted(t))
	if bytes.Contains(raw, []byte("s3cret")) {
		t.Fatal("the plain password is in the command")
	}
	if !fsm.CheckPassword(first.GetPasswordHash(), fsm.PasswordSaltLen, "s3cret") {
		t.Fatal("hash does not check against the password")
	}

	// ChangePassword keeps the tags and picks a new salt.
	n.Update(func(s *opstest.State) { s.UserList = []*proto.UserInfo{{Name: "alice", Tags: []string{"management"}}} })
	if _, err := tn.client.ChangePassword(ctx, &proto.ChangePasswordRequest{Name: "alice", Password: "s3cret"}); err != nil {
		t.Fatal(err)
	}
	second := n.LastSubmitted(t).GetUserPut()
	if bytes.Equal(first.GetPasswordHash()[:fsm.PasswordSaltLen], second.GetPasswordHash()[:fsm.PasswordSaltLen]) {
		t.Fatal("the same salt was used twice")
	}
	if !fsm.CheckPassword(second.GetPasswordHash(), fsm.PasswordSaltLen, "s3cret") || len(second.GetTags()) != 1 {
		t.Fatalf("changed user %v", second)
	}

	_, err := tn.client.AddUser(ctx, &proto.AddUserRequest{Name: "alice", Password: "x"})
	wantCode(t, err, codes.AlreadyExists, "alice")
	_, err = tn.client.ChangePassword(ctx, &proto.ChangePasswordRequest{Name: "nobody", Password: "x"})
	wantCode(t, err, codes.NotFound, "nobody")
	_, err = tn.client.SetUserTags(ctx, &proto.SetUserTagsRequest{Name: "nobody"})
	wantCode(t, err, codes.NotFound, "nobody")
	_, err = tn.client.AddUser(ctx, &proto.AddUserRequest{Password: "x"})
	wantCode(t, err, codes.InvalidArgument, "user name")
}

func TestAdmin_PolicyValidation(t *testing.T) {
	n := opstest.NewNode("n1")
	tn := startNode(t, n, nil)
	ctx := opstest.Context(t)
	cases := []struct {
		name string
		req  *proto.SetPolicyRequest
		msg  string
	}{
		{"negative ttl", &proto.SetPolicyRequest{Name: "p", Pattern: ".*", Definition: &proto.PolicyDefinition{MessageTtl: i64(-1)}}, "message-ttl"},
		{"zero expires", &proto.SetPolicyRequest{Name: "p", Pattern: ".*", Definition: &proto.PolicyDefinition{Expires: i64(0)}}, "expires"},
		{"negative max-length", &proto.SetPolicyRequest{Name: "p", Pattern: ".*", Definition: &proto.PolicyDefinition{MaxLength: i64(-5)}}, "max-length"},
		{"negative max-length-bytes", &proto.SetPolicyRequest{Name: "p", Pattern: ".*", Definition: &proto.PolicyDefinition{MaxLengthBytes: i64(-5)}}, "max-length-bytes"},
		{"negative consumer-timeout", &proto.SetPolicyRequest{Name: "p", Pattern: ".*", Definition: &proto.PolicyDefinition{ConsumerTimeout: i64(-1)}}, "consumer-timeout"},
		{"bad overflow", &proto.SetPolicyRequest{Name: "p", Pattern: ".*", Definition: &proto.PolicyDefinition{Overflow: str("drop-tail")}}, "overflow"},
		{"bad pattern", &proto.SetPolicyRequest{Name: "p", Pattern: "(", Definition: &proto.PolicyDefinition{MessageTtl: i64(1)}}, "pattern"},
		{"bad apply-to", &proto.SetPolicyRequest{Name: "p", Pattern: ".*", ApplyTo: "streams", Definition: &proto.PolicyDefinition{MessageTtl: i64(1)}}, "apply-to"},
		{"empty definition", &proto.SetPolicyRequest{Name: "p", Pattern: ".*", Definition: &proto.PolicyDefinition{}}, "definition"},
		{"no definition", &proto.SetPolicyRequest{Name: "p", Pattern: ".*"}, "definition"},
		{"no name", &proto.SetPolicyRequest{Pattern: ".*", Definition: &proto.PolicyDefinition{MessageTtl: i64(1)}}, "name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tn.client.SetPolicy(ctx, tc.req)
			wantCode(t, err, codes.InvalidArgument, tc.msg)
		})
	}
	if n.SubmittedCount() != 0 {
		t.Fatalf("%d invalid policies reached the log", n.SubmittedCount())
	}
	// The boundaries are valid.
	if _, err := tn.client.SetPolicy(ctx, &proto.SetPolicyRequest{Name: "p", Pattern: ".*", Definition: &proto.PolicyDefinition{
		MessageTtl: i64(0), Expires: i64(1), MaxLength: i64(0), Overflow: str("reject-publish-dlx")}}); err != nil {
		t.Fatal(err)
	}
	_, err := tn.client.SetPermissions(ctx, &proto.SetPermissionsRequest{User: "u", Configure: "[", Write: ".*", Read: ".*"})
	wantCode(t, err, codes.InvalidArgument, "configure")
}

func TestAdmin_ResultCodes(t *testing.T) {
	n := opstest.NewNode("n1")
	var code uint32
	n.Result = func(*proto.Command) *proto.Result { return &proto.Result{Code: code, Text: "REPLY_TEXT"} }
	tn := startNode(t, n, nil)
	ctx := opstest.Context(t)
	for _, tc := range []struct {
		amqp uint32
		want codes.Code
	}{
		{404, codes.NotFound}, {406, codes.FailedPrecondition}, {405, codes.FailedPrecondition},
		{403, codes.PermissionDenied}, {540, codes.Unimplemented}, {541, codes.Internal}, {530, codes.Unknown},
	} {
		n.Mu.Lock()
		code = tc.amqp
		n.Mu.Unlock()
		_, err := tn.client.DeleteQueue(ctx, &proto.DeleteQueueRequest{Name: "q"})
		wantCode(t, err, tc.want, "REPLY_TEXT")
		_, err = tn.client.DeleteVhost(ctx, &proto.DeleteVhostRequest{Name: "v"})
		wantCode(t, err, tc.want, "REPLY_TEXT")
	}
}

func TestAdmin_ConsistentReadForwardsToLeader(t *testing.T) {
	leader := opstest.NewNode("n1")
	leader.State.QueueList = []*proto.QueueInfo{{Vhost: "/", Name: "on-leader"}}
	leader.Raft = ops.RaftStats{State: "Leader"}
	follower := opstest.NewNode("n2")
	follower.LeaderID = "n1"
	follower.State.QueueList = []*proto.QueueInfo{{Vhost: "/", Name: "on-follower"}}
	follower.Raft = ops.RaftStats{State: "Follower"}
	l := startNode(t, leader, nil)
	f := startNode(t, follower, nil)
	setMembers(l, f)
	ctx := opstest.Context(t)

	qs, err := f.client.ListQueues(ctx, &proto.ListQueuesRequest{})
	if err != nil || qs.GetQueues()[0].GetName() != "on-follower" {
		t.Fatalf("local read: %v %v", qs, err)
	}
	qs, err = f.client.ListQueues(ctx, &proto.ListQueuesRequest{Consistent: true})
	if err != nil || qs.GetQueues()[0].GetName() != "on-leader" {
		t.Fatalf("consistent read: %v %v", qs, err)
	}
	q, err := f.client.GetQueue(ctx, &proto.GetQueueRequest{Name: "on-leader", Consistent: true})
	if err != nil || q.GetName() != "on-leader" {
		t.Fatalf("consistent GetQueue: %v %v", q, err)
	}
	cs, err := f.client.ClusterStatus(ctx, &proto.ClusterStatusRequest{Consistent: true})
	if err != nil || cs.GetNodeId() != "n1" || cs.GetRaftState() != "Leader" {
		t.Fatalf("consistent ClusterStatus: %v %v", cs, err)
	}

	// The leader stepped down while the call was forwarded: no second hop.
	leader.SetLeader("n2")
	follower.SetLeader("n1")
	_, err = f.client.ListQueues(ctx, &proto.ListQueuesRequest{Consistent: true})
	wantCode(t, err, codes.Unavailable, "not the leader")

	follower.SetLeader("")
	_, err = f.client.ListUsers(ctx, &proto.ListRequest{Consistent: true})
	wantCode(t, err, codes.Unavailable, "no leader")

	// An election under way when the call comes: it is served by the
	// leader elected, not refused.
	leader.SetLeader("n1")
	follower.Mu.Lock()
	asked := follower.LeaderAsked
	follower.Mu.Unlock()
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for range tick.C {
			follower.Mu.Lock()
			waiting := follower.LeaderAsked > asked+1
			follower.Mu.Unlock()
			if waiting {
				follower.SetLeader("n1")
				return
			}
		}
	}()
	qs, err = f.client.ListQueues(ctx, &proto.ListQueuesRequest{Consistent: true})
	if err != nil || qs.GetQueues()[0].GetName() != "on-leader" {
		t.Fatalf("consistent read during an election: %v %v", qs, err)
	}
}

func TestAdmin_ListConnectionsMergesPeers(t *testing.T) {
	n1 := startNode(t, opstest.NewNode("n1"), &opstest.Conns{Open: []*proto.ConnectionInfo{{Id: "c1"}, {Id: "c2"}}})
	n2 := startNode(t, opstest.NewNode("n2"), &opstest.Conns{Open: []*proto.ConnectionInfo{{Id: "c3"}}})
	n3 := startNode(t, opstest.NewNode("n3"), &opstest.Conns{Open: []*proto.ConnectionInfo{{Id: "c4"}}})
	setMembers(n1, n2, n3)
	ctx := opstest.Context(t)

	r, err := n1.client.ListConnections(ctx, &proto.ListConnectionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range r.GetConnections() {
		got = append(got, c.GetNode()+"/"+c.GetId())
	}
	if strings.Join(got, ",") != "n1/c1,n1/c2,n2/c3,n3/c4" {
		t.Fatalf("merged connections %v", got)
	}
	r, err = n1.client.ListConnections(ctx, &proto.ListConnectionsRequest{Local: true})
	if err != nil || len(r.GetConnections()) != 2 {
		t.Fatalf("local connections %v %v", r, err)
	}

	// A dead member is not asked; an unreachable one is left out.
	n1.node.Mu.Lock()
	n1.node.MemberList = []*proto.NodeStatus{
		{Id: "n1", GrpcAddr: n1.addr, Health: "alive"},
		{Id: "n2", GrpcAddr: n2.addr, Health: "dead"},
		{Id: "n3", GrpcAddr: "127.0.0.1:1", Health: "alive"},
	}
	n1.node.Mu.Unlock()
	r, err = n1.client.ListConnections(ctx, &proto.ListConnectionsRequest{})
	if err != nil || len(r.GetConnections()) != 2 {
		t.Fatalf("with dead peers: %v %v", r, err)
	}
}

func TestAdmin_CloseConnectionRoutes(t *testing.T) {
	n1 := startNode(t, opstest.NewNode("n1"), &opstest.Conns{Open: []*proto.ConnectionInfo{{Id: "c1"}}})
	n2 := startNode(t, opstest.NewNode("n2"), &opstest.Conns{Open: []*proto.ConnectionInfo{{Id: "c3"}}})
	setMembers(n1, n2)
	ctx := opstest.Context(t)

	if _, err := n1.client.CloseConnection(ctx, &proto.CloseConnectionRequest{Node: "n2", Id: "c3", Reason: "bye"}); err != nil {
		t.Fatal(err)
	}
	if len(n2.conns.Closed) != 1 || n2.conns.Closed[0] != "c3:bye" || len(n1.conns.Closed) != 0 {
		t.Fatalf("closed n1=%v n2=%v", n1.conns.Closed, n2.conns.Closed)
	}
	if _, err := n1.client.CloseConnection(ctx, &proto.CloseConnectionRequest{Id: "c1"}); err != nil {
		t.Fatal(err)
	}
	_, err := n1.client.CloseConnection(ctx, &proto.CloseConnectionRequest{Node: "n2", Id: "c9"})
	wantCode(t, err, codes.NotFound, "c9")
	_, err = n1.client.CloseConnection(ctx, &proto.CloseConnectionRequest{Node: "n7", Id: "c1"})
	wantCode(t, err, codes.NotFound, "n7")
}

func TestAdmin_LeadershipAndMembership(t *testing.T) {
	leader := opstest.NewNode("n1")
	follower := opstest.NewNode("n2")
	follower.LeaderID = "n1"
	l := startNode(t, leader, nil)
	f := startNode(t, follower, nil)
	setMembers(l, f)
	ctx := opstest.Context(t)

	// Sent to the follower, both calls run on the leader.
	if _, err := f.client.RemoveNode(ctx, &proto.RemoveNodeRequest{NodeId: "n2"}); err != nil {
		t.Fatal(err)
	}
	if len(leader.Removed) != 1 || leader.Removed[0] != "n2" || len(follower.Removed) != 0 {
		t.Fatalf("removed leader=%v follower=%v", leader.Removed, follower.Removed)
	}
	_, err := l.client.RemoveNode(ctx, &proto.RemoveNodeRequest{NodeId: "n9"})
	wantCode(t, err, codes.NotFound, "n9")
	_, err = l.client.RemoveNode(ctx, &proto.RemoveNodeRequest{})
	wantCode(t, err, codes.InvalidArgument, "node id")

	r, err := f.client.TransferLeadership(ctx, &proto.TransferLeadershipRequest{NodeId: "n2"})
	if err != nil || r.GetLeaderId() != "n2" {
		t.Fatalf("transfer: %v %v", r, err)
	}
	if len(leader.Transferred) != 1 || leader.Transferred[0] != "n2" {
		t.Fatalf("transferred %v", leader.Transferred)
	}
	// n2 now leads: n1 forwards to it, and it refuses an unknown target.
	follower.SetLeader("n2")
	_, err = l.client.TransferLeadership(ctx, &proto.TransferLeadershipRequest{NodeId: "n9"})
	wantCode(t, err, codes.NotFound, "n9")
}

// consistentNode is a opstest.Node that reads through ConsistentView, counting
// the calls.
type consistentNode struct {
	*opstest.Node
	consistent int
}

func (c *consistentNode) ConsistentView(_ context.Context, fn func(ops.State)) error {
	c.Mu.Lock()
	c.consistent++
	c.Mu.Unlock()
	c.View(fn)
	return nil
}

func TestAdmin_LeaderUsesConsistentView(t *testing.T) {
	cn := &consistentNode{Node: opstest.NewNode("n1")}
	cn.State.UserList = []*proto.UserInfo{{Name: "guest"}}
	client := serveAdmin(t, cn)
	ctx := opstest.Context(t)
	if _, err := client.ListUsers(ctx, &proto.ListRequest{}); err != nil {
		t.Fatal(err)
	}
	if cn.consistent != 0 {
		t.Fatal("a local read went through ConsistentView")
	}
	us, err := client.ListUsers(ctx, &proto.ListRequest{Consistent: true})
	if err != nil || len(us.GetUsers()) != 1 {
		t.Fatalf("consistent ListUsers %v %v", us, err)
	}
	cn.Mu.Lock()
	defer cn.Mu.Unlock()
	if cn.consistent != 1 {
		t.Fatalf("ConsistentView called %d times", cn.consistent)
	}
}

func TestAdmin_SetUserTagsUnknownUser(t *testing.T) {
	n := opstest.NewNode("n1")
	client := serveAdmin(t, n)
	_, err := client.SetUserTags(opstest.Context(t), &proto.SetUserTagsRequest{Name: "nobody", Tags: []string{"x"}})
	wantCode(t, err, codes.NotFound, "nobody")
	if n.SubmittedCount() != 0 {
		t.Fatal("an unknown user reached the log")
	}
}

func TestAdmin_NoAMQPServer(t *testing.T) {
	client := serveAdmin(t, opstest.NewNode("n1"))
	ctx := opstest.Context(t)
	r, err := client.ListConnections(ctx, &proto.ListConnectionsRequest{})
	if err != nil || len(r.GetConnections()) != 0 {
		t.Fatalf("ListConnections %v %v", r, err)
	}
	_, err = client.CloseConnection(ctx, &proto.CloseConnectionRequest{Id: "c1"})
	wantCode(t, err, codes.NotFound, "c1")
	_, err = client.CloseConnection(ctx, &proto.CloseConnectionRequest{})
	wantCode(t, err, codes.InvalidArgument, "connection id")
}

// TestAdmin_Environment answers with the node's settings as the node gives
// them, and with none when it gives none.
func TestAdmin_Environment(t *testing.T) {
	n := opstest.NewNode("n1")
	settings := []*proto.Setting{{Name: "amqp-addr", Value: ":5672"}, {Name: "cluster-secret", Value: "<set>"}}
	srv := New(ops.New(ops.Deps{Node: n, Environment: func() []*proto.Setting { return settings }}))
	r, err := srv.Environment(opstest.Context(t), &proto.EnvironmentRequest{})
	if err != nil || r.GetNodeId() != "n1" || len(r.GetSettings()) != 2 || r.GetSettings()[1].GetValue() != "<set>" {
		t.Fatalf("environment: %v, %v", r, err)
	}
	r, err = New(ops.New(ops.Deps{Node: n})).Environment(opstest.Context(t), &proto.EnvironmentRequest{})
	if err != nil || len(r.GetSettings()) != 0 {
		t.Fatalf("without settings: %v, %v", r, err)
	}
}
