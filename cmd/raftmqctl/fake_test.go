package main

import (
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	protobuf "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/proto"
)

// fakeAdmin answers every RPC with a canned response and records the last
// request.
type fakeAdmin struct {
	proto.UnimplementedAdminServer
	mu   sync.Mutex
	last protobuf.Message
	err  error
}

func (f *fakeAdmin) record(m protobuf.Message) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last = m
	return f.err
}

func (f *fakeAdmin) lastRequest() protobuf.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

func i64(v int64) *int64   { return &v }
func str(v string) *string { return &v }

func (f *fakeAdmin) ClusterStatus(_ context.Context, r *proto.ClusterStatusRequest) (*proto.ClusterStatusResponse, error) {
	return &proto.ClusterStatusResponse{NodeId: "n1", LeaderId: "n1", LeaderAddr: "10.0.0.1:5681", RaftState: "Leader",
		Term: 3, CommitIndex: 42, AppliedIndex: 42, LastLogIndex: 43, ClockMs: 1700000000000, Version: "v1.2.3", UptimeMs: 3723500,
		OsPid: 4242, Processors: 2, Goroutines: 97, MemUsed: 52428800, MemLimit: 41943040, MemLimitRelative: 0.4,
		FdUsed: 31, FdTotal: 1048576, DiskFree: 48413100000, DiskFreeLimit: 1073741824,
		Nodes: []*proto.NodeStatus{
			{Id: "n1", RaftAddr: "10.0.0.1:5681", GrpcAddr: "10.0.0.1:5680", AmqpAddr: "10.0.0.1:5672", Health: "alive", Suffrage: "voter", Leader: true},
			{Id: "n2", RaftAddr: "10.0.0.2:5681", GrpcAddr: "10.0.0.2:5680", AmqpAddr: "10.0.0.2:5672", Health: "alive", Suffrage: "voter"},
		}}, f.record(r)
}
func (f *fakeAdmin) TransferLeadership(_ context.Context, r *proto.TransferLeadershipRequest) (*proto.TransferLeadershipResponse, error) {
	id := r.GetNodeId()
	if id == "" {
		id = "n2"
	}
	return &proto.TransferLeadershipResponse{LeaderId: id}, f.record(r)
}
func (f *fakeAdmin) RemoveNode(_ context.Context, r *proto.RemoveNodeRequest) (*proto.RemoveNodeResponse, error) {
	return &proto.RemoveNodeResponse{}, f.record(r)
}
func (f *fakeAdmin) ListQueues(_ context.Context, r *proto.ListQueuesRequest) (*proto.ListQueuesResponse, error) {
	return &proto.ListQueuesResponse{Queues: []*proto.QueueInfo{
		{Vhost: "/", Name: "orders", Durable: true, Ready: 10, Unacked: 2, Consumers: 1, Policy: "ttl", ReadyBytes: 100, UnackedBytes: 20,
			EffectiveMessageTtl: 60000, EffectiveExpires: -1, EarliestDeadlineMs: 1700000060000,
			Arguments: &proto.Table{Fields: []*proto.Field{{Key: "x-message-ttl", Value: &proto.Value{Kind: &proto.Value_Int32{Int32: 60000}}}}}},
		{Vhost: "/", Name: "a-much-longer-queue-name", EffectiveMessageTtl: -1, EffectiveExpires: -1},
	}}, f.record(r)
}
func (f *fakeAdmin) PurgeQueue(_ context.Context, r *proto.PurgeQueueRequest) (*proto.PurgeQueueResponse, error) {
	return &proto.PurgeQueueResponse{MessageCount: 10}, f.record(r)
}
func (f *fakeAdmin) DeleteQueue(_ context.Context, r *proto.DeleteQueueRequest) (*proto.DeleteQueueResponse, error) {
	return &proto.DeleteQueueResponse{MessageCount: 4}, f.record(r)
}
func (f *fakeAdmin) ListExchanges(_ context.Context, r *proto.ListRequest) (*proto.ListExchangesResponse, error) {
	return &proto.ListExchangesResponse{Exchanges: []*proto.ExchangeInfo{
		{Vhost: "/", Name: "", Type: "direct", Durable: true},
		{Vhost: "/", Name: "amq.topic", Type: "topic", Durable: true},
	}}, f.record(r)
}
func (f *fakeAdmin) ListBindings(_ context.Context, r *proto.ListRequest) (*proto.ListBindingsResponse, error) {
	return &proto.ListBindingsResponse{Bindings: []*proto.BindingInfo{
		{Vhost: "/", Source: "amq.topic", Destination: "orders", DestinationKind: "queue", RoutingKey: "order.*"},
	}}, f.record(r)
}
func (f *fakeAdmin) ListConsumers(_ context.Context, r *proto.ListRequest) (*proto.ListConsumersResponse, error) {
	return &proto.ListConsumersResponse{Consumers: []*proto.ConsumerInfo{
		{Vhost: "/", Queue: "orders", Prefetch: 10, Unacked: 2, Active: true, ActivityStatus: "single_active",
			Consumer: &proto.ConsumerRef{Tag: "ctag-1", Channel: &proto.ChannelRef{Node: "n1", Connection: "c7", Channel: 1}}},
		{Vhost: "/", Queue: "orders", Prefetch: 10, ActivityStatus: "waiting",
			Consumer: &proto.ConsumerRef{Tag: "ctag-2", Channel: &proto.ChannelRef{Node: "n2", Connection: "c1", Channel: 1}}},
	}}, f.record(r)
}
func (f *fakeAdmin) ListConnections(_ context.Context, r *proto.ListConnectionsRequest) (*proto.ListConnectionsResponse, error) {
	return &proto.ListConnectionsResponse{Connections: []*proto.ConnectionInfo{
		{Node: "n1", Id: "c7", Peer: "10.0.0.9:40000", User: "guest", Vhost: "/", Channels: 2, UserProvidedName: "orders-worker",
			ClientProperties: &proto.Table{Fields: []*proto.Field{{Key: "connection_name", Value: &proto.Value{Kind: &proto.Value_LongString{LongString: []byte("orders-worker")}}}}}},
		{Node: "n2", Id: "c1", Peer: "10.0.0.8:40001", User: "app", Vhost: "prod", Channels: 1},
	}}, f.record(r)
}
func (f *fakeAdmin) CloseConnection(_ context.Context, r *proto.CloseConnectionRequest) (*proto.CloseConnectionResponse, error) {
	return &proto.CloseConnectionResponse{}, f.record(r)
}
func (f *fakeAdmin) SetPolicy(_ context.Context, r *proto.SetPolicyRequest) (*proto.SetPolicyResponse, error) {
	return &proto.SetPolicyResponse{}, f.record(r)
}
func (f *fakeAdmin) ClearPolicy(_ context.Context, r *proto.ClearPolicyRequest) (*proto.ClearPolicyResponse, error) {
	return &proto.ClearPolicyResponse{}, f.record(r)
}
func (f *fakeAdmin) ListPolicies(_ context.Context, r *proto.ListPoliciesRequest) (*proto.ListPoliciesResponse, error) {
	return &proto.ListPoliciesResponse{Policies: []*proto.PolicyInfo{
		{Vhost: "/", Name: "ttl", Pattern: "^orders$", ApplyTo: "queues", Priority: 1, Operator: r.GetOperator(),
			Definition: &proto.PolicyDefinition{MessageTtl: i64(60000), DeadLetterExchange: str("dlx")}},
	}}, f.record(r)
}
func (f *fakeAdmin) AddUser(_ context.Context, r *proto.AddUserRequest) (*proto.AddUserResponse, error) {
	return &proto.AddUserResponse{}, f.record(r)
}
func (f *fakeAdmin) DeleteUser(_ context.Context, r *proto.DeleteUserRequest) (*proto.DeleteUserResponse, error) {
	return &proto.DeleteUserResponse{}, f.record(r)
}
func (f *fakeAdmin) ChangePassword(_ context.Context, r *proto.ChangePasswordRequest) (*proto.ChangePasswordResponse, error) {
	return &proto.ChangePasswordResponse{}, f.record(r)
}
func (f *fakeAdmin) SetUserTags(_ context.Context, r *proto.SetUserTagsRequest) (*proto.SetUserTagsResponse, error) {
	return &proto.SetUserTagsResponse{}, f.record(r)
}
func (f *fakeAdmin) ListUsers(_ context.Context, r *proto.ListRequest) (*proto.ListUsersResponse, error) {
	return &proto.ListUsersResponse{Users: []*proto.UserInfo{
		{Name: "guest", Tags: []string{"administrator"}}, {Name: "app"},
	}}, f.record(r)
}
func (f *fakeAdmin) SetPermissions(_ context.Context, r *proto.SetPermissionsRequest) (*proto.SetPermissionsResponse, error) {
	return &proto.SetPermissionsResponse{}, f.record(r)
}
func (f *fakeAdmin) ClearPermissions(_ context.Context, r *proto.ClearPermissionsRequest) (*proto.ClearPermissionsResponse, error) {
	return &proto.ClearPermissionsResponse{}, f.record(r)
}
func (f *fakeAdmin) ListPermissions(_ context.Context, r *proto.ListRequest) (*proto.ListPermissionsResponse, error) {
	return &proto.ListPermissionsResponse{Permissions: []*proto.PermissionInfo{
		{User: "guest", Vhost: "/", Configure: ".*", Write: ".*", Read: ".*"},
	}}, f.record(r)
}
func (f *fakeAdmin) AddVhost(_ context.Context, r *proto.AddVhostRequest) (*proto.AddVhostResponse, error) {
	return &proto.AddVhostResponse{}, f.record(r)
}
func (f *fakeAdmin) DeleteVhost(_ context.Context, r *proto.DeleteVhostRequest) (*proto.DeleteVhostResponse, error) {
	return &proto.DeleteVhostResponse{}, f.record(r)
}
func (f *fakeAdmin) ListVhosts(_ context.Context, r *proto.ListRequest) (*proto.ListVhostsResponse, error) {
	return &proto.ListVhostsResponse{Vhosts: []*proto.VhostInfo{{Name: "/", Description: "Default virtual host"}, {Name: "prod"}}}, f.record(r)
}
func (f *fakeAdmin) Environment(_ context.Context, r *proto.EnvironmentRequest) (*proto.EnvironmentResponse, error) {
	return &proto.EnvironmentResponse{NodeId: "n1", Settings: []*proto.Setting{
		{Name: "amqp-addr", Value: ":5672"}, {Name: "cluster-secret", Value: "<set>"},
	}}, f.record(r)
}
func (f *fakeAdmin) Digest(_ context.Context, r *proto.DigestRequest) (*proto.DigestResponse, error) {
	return &proto.DigestResponse{NodeId: "n1", AppliedIndex: 42, Digest: "ab12"}, f.record(r)
}

// startFake serves fake on loopback and returns a dial function that
// connects to it whatever address it is given, recording the address.
func startFake(t *testing.T, fake proto.AdminServer) (dial func(string) (proto.AdminClient, error), dialed *[]string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	proto.RegisterAdminServer(srv, fake)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	var addrs []string
	return func(addr string) (proto.AdminClient, error) {
		addrs = append(addrs, addr)
		return proto.NewAdminClient(cc), nil
	}, &addrs
}
