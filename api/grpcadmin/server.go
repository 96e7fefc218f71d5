package grpcadmin

import (
	"context"
	"errors"
	"sync"

	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/api/mgmt"
	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/proto"
)

// Server is the raftmq.v1.Admin gRPC service of one node: each method
// is the operation of that name, its *ops.Error answered as a status (the
// kind's code; a refused command's message is "406 PRECONDITION_FAILED -
// ..." so that clients see RabbitMQ's reply).
type Server struct {
	proto.UnimplementedAdminServer
	ops *ops.Service

	defsOnce sync.Once
	defs     *mgmt.Server // definitions.go
}

// New returns the Admin service over o. Register it with
// proto.RegisterAdminServer.
func New(o *ops.Service) *Server { return &Server{ops: o} }

// statusOf is err as a gRPC status: an *ops.Error by its kind, anything
// else as it is (gRPC answers it as Unknown).
func statusOf(err error) error {
	var e *ops.Error
	if errors.As(err, &e) {
		return status.Error(e.Kind.GRPCCode(), e.Error())
	}
	return err
}

// answer is an operation's result as the service's answer.
func answer[T any](r T, err error) (T, error) {
	if err != nil {
		var zero T
		return zero, statusOf(err)
	}
	return r, nil
}

// Environment implements proto.Server.
func (s *Server) Environment(ctx context.Context, req *proto.EnvironmentRequest) (*proto.EnvironmentResponse, error) {
	return answer(s.ops.Environment(ctx, req))
}

// ClusterStatus implements proto.Server.
func (s *Server) ClusterStatus(ctx context.Context, req *proto.ClusterStatusRequest) (*proto.ClusterStatusResponse, error) {
	return answer(s.ops.ClusterStatus(ctx, req))
}

// TransferLeadership implements proto.Server.
func (s *Server) TransferLeadership(ctx context.Context, req *proto.TransferLeadershipRequest) (*proto.TransferLeadershipResponse, error) {
	return answer(s.ops.TransferLeadership(ctx, req))
}

// ListGroups implements proto.Server.
func (s *Server) ListGroups(ctx context.Context, req *proto.ListGroupsRequest) (*proto.ListGroupsResponse, error) {
	return answer(s.ops.ListGroups(ctx, req))
}

// GrowGroups implements proto.Server.
func (s *Server) GrowGroups(ctx context.Context, req *proto.GrowGroupsRequest) (*proto.GroupChangesResponse, error) {
	return answer(s.ops.GrowGroups(ctx, req))
}

// ShrinkGroups implements proto.Server.
func (s *Server) ShrinkGroups(ctx context.Context, req *proto.ShrinkGroupsRequest) (*proto.GroupChangesResponse, error) {
	return answer(s.ops.ShrinkGroups(ctx, req))
}

// RebalanceGroups implements proto.Server.
func (s *Server) RebalanceGroups(ctx context.Context, req *proto.RebalanceGroupsRequest) (*proto.RebalanceGroupsResponse, error) {
	return answer(s.ops.RebalanceGroups(ctx, req))
}

// RemoveNode implements proto.Server.
func (s *Server) RemoveNode(ctx context.Context, req *proto.RemoveNodeRequest) (*proto.RemoveNodeResponse, error) {
	return answer(s.ops.RemoveNode(ctx, req))
}

// ListQueues implements proto.Server.
func (s *Server) ListQueues(ctx context.Context, req *proto.ListQueuesRequest) (*proto.ListQueuesResponse, error) {
	return answer(s.ops.ListQueues(ctx, req))
}

// GetQueue implements proto.Server.
func (s *Server) GetQueue(ctx context.Context, req *proto.GetQueueRequest) (*proto.QueueInfo, error) {
	return answer(s.ops.GetQueue(ctx, req))
}

// PurgeQueue implements proto.Server.
func (s *Server) PurgeQueue(ctx context.Context, req *proto.PurgeQueueRequest) (*proto.PurgeQueueResponse, error) {
	return answer(s.ops.PurgeQueue(ctx, req))
}

// DeleteQueue implements proto.Server.
func (s *Server) DeleteQueue(ctx context.Context, req *proto.DeleteQueueRequest) (*proto.DeleteQueueResponse, error) {
	return answer(s.ops.DeleteQueue(ctx, req))
}

// ListExchanges implements proto.Server.
func (s *Server) ListExchanges(ctx context.Context, req *proto.ListRequest) (*proto.ListExchangesResponse, error) {
	return answer(s.ops.ListExchanges(ctx, req))
}

// ListBindings implements proto.Server.
func (s *Server) ListBindings(ctx context.Context, req *proto.ListRequest) (*proto.ListBindingsResponse, error) {
	return answer(s.ops.ListBindings(ctx, req))
}

// ListConsumers implements proto.Server.
func (s *Server) ListConsumers(ctx context.Context, req *proto.ListRequest) (*proto.ListConsumersResponse, error) {
	return answer(s.ops.ListConsumers(ctx, req))
}

// ListConnections implements proto.Server.
func (s *Server) ListConnections(ctx context.Context, req *proto.ListConnectionsRequest) (*proto.ListConnectionsResponse, error) {
	return answer(s.ops.ListConnections(ctx, req))
}

// CloseConnection implements proto.Server.
func (s *Server) CloseConnection(ctx context.Context, req *proto.CloseConnectionRequest) (*proto.CloseConnectionResponse, error) {
	return answer(s.ops.CloseConnection(ctx, req))
}

// SetPolicy implements proto.Server.
func (s *Server) SetPolicy(ctx context.Context, req *proto.SetPolicyRequest) (*proto.SetPolicyResponse, error) {
	return answer(s.ops.SetPolicy(ctx, req))
}

// ClearPolicy implements proto.Server.
func (s *Server) ClearPolicy(ctx context.Context, req *proto.ClearPolicyRequest) (*proto.ClearPolicyResponse, error) {
	return answer(s.ops.ClearPolicy(ctx, req))
}

// ListPolicies implements proto.Server.
func (s *Server) ListPolicies(ctx context.Context, req *proto.ListPoliciesRequest) (*proto.ListPoliciesResponse, error) {
	return answer(s.ops.ListPolicies(ctx, req))
}

// AddUser implements proto.Server.
func (s *Server) AddUser(ctx context.Context, req *proto.AddUserRequest) (*proto.AddUserResponse, error) {
	return answer(s.ops.AddUser(ctx, req))
}

// DeleteUser implements proto.Server.
func (s *Server) DeleteUser(ctx context.Context, req *proto.DeleteUserRequest) (*proto.DeleteUserResponse, error) {
	return answer(s.ops.DeleteUser(ctx, req))
}

// ChangePassword implements proto.Server.
func (s *Server) ChangePassword(ctx context.Context, req *proto.ChangePasswordRequest) (*proto.ChangePasswordResponse, error) {
	return answer(s.ops.ChangePassword(ctx, req))
}

// SetUserTags implements proto.Server.
func (s *Server) SetUserTags(ctx context.Context, req *proto.SetUserTagsRequest) (*proto.SetUserTagsResponse, error) {
	return answer(s.ops.SetUserTags(ctx, req))
}

// ListUsers implements proto.Server.
func (s *Server) ListUsers(ctx context.Context, req *proto.ListRequest) (*proto.ListUsersResponse, error) {
	return answer(s.ops.ListUsers(ctx, req))
}

// SetPermissions implements proto.Server.
func (s *Server) SetPermissions(ctx context.Context, req *proto.SetPermissionsRequest) (*proto.SetPermissionsResponse, error) {
	return answer(s.ops.SetPermissions(ctx, req))
}

// ClearPermissions implements proto.Server.
func (s *Server) ClearPermissions(ctx context.Context, req *proto.ClearPermissionsRequest) (*proto.ClearPermissionsResponse, error) {
	return answer(s.ops.ClearPermissions(ctx, req))
}

// ListPermissions implements proto.Server.
func (s *Server) ListPermissions(ctx context.Context, req *proto.ListRequest) (*proto.ListPermissionsResponse, error) {
	return answer(s.ops.ListPermissions(ctx, req))
}

// AddVhost implements proto.Server.
func (s *Server) AddVhost(ctx context.Context, req *proto.AddVhostRequest) (*proto.AddVhostResponse, error) {
	return answer(s.ops.AddVhost(ctx, req))
}

// DeleteVhost implements proto.Server.
func (s *Server) DeleteVhost(ctx context.Context, req *proto.DeleteVhostRequest) (*proto.DeleteVhostResponse, error) {
	return answer(s.ops.DeleteVhost(ctx, req))
}

// ListVhosts implements proto.Server.
func (s *Server) ListVhosts(ctx context.Context, req *proto.ListRequest) (*proto.ListVhostsResponse, error) {
	return answer(s.ops.ListVhosts(ctx, req))
}

// SetVhostLimits implements proto.Server.
func (s *Server) SetVhostLimits(ctx context.Context, req *proto.SetVhostLimitsRequest) (*proto.SetVhostLimitsResponse, error) {
	return answer(s.ops.SetVhostLimits(ctx, req))
}

// ListVhostLimits implements proto.Server.
func (s *Server) ListVhostLimits(ctx context.Context, req *proto.ListVhostLimitsRequest) (*proto.ListVhostLimitsResponse, error) {
	return answer(s.ops.ListVhostLimits(ctx, req))
}

// Digest implements proto.Server.
func (s *Server) Digest(ctx context.Context, req *proto.DigestRequest) (*proto.DigestResponse, error) {
	return answer(s.ops.Digest(ctx, req))
}

// ListDelayedMessages implements proto.Server.
func (s *Server) ListDelayedMessages(ctx context.Context, req *proto.ListDelayedMessagesRequest) (*proto.ListDelayedMessagesResponse, error) {
	return answer(s.ops.ListDelayedMessages(ctx, req))
}

// CancelDelayedMessage implements proto.Server.
func (s *Server) CancelDelayedMessage(ctx context.Context, req *proto.CancelDelayedMessageRequest) (*proto.CancelDelayedMessageResponse, error) {
	return answer(s.ops.CancelDelayedMessage(ctx, req))
}

// PurgeDelayedMessages implements proto.Server.
func (s *Server) PurgeDelayedMessages(ctx context.Context, req *proto.PurgeDelayedMessagesRequest) (*proto.PurgeDelayedMessagesResponse, error) {
	return answer(s.ops.PurgeDelayedMessages(ctx, req))
}
