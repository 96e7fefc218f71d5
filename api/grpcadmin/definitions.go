package grpcadmin

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/api/mgmt"
	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/proto"
)

// The definitions calls are the management API's /api/definitions over
// gRPC, so that raftmqctl export_definitions and import_definitions
// authenticate as every other verb does: by the node's admin secret on
// its host, as rabbitmqctl by the Erlang cookie, with no administrator's
// password. They are the management API's own export and import, so the
// two answer the same documents.

// definitions is the management API over the service's operations, made
// at the first definitions call.
func (s *Server) definitions() *mgmt.Server {
	s.defsOnce.Do(func() { s.defs = mgmt.New(mgmt.Options{Ops: s.ops}) })
	return s.defs
}

// vhostExists reports whether the node's state has vhost v.
func (s *Server) vhostExists(v string) bool {
	exists := false
	s.ops.Node().View(func(st ops.State) {
		for _, x := range st.Vhosts() {
			exists = exists || x.GetName() == v
		}
	})
	return exists
}

// ExportDefinitions implements proto.Server.
func (s *Server) ExportDefinitions(_ context.Context, req *proto.ExportDefinitionsRequest) (*proto.ExportDefinitionsResponse, error) {
	if v := req.GetVhost(); v != "" && !s.vhostExists(v) {
		return nil, status.Errorf(codes.NotFound, "no vhost '%s'", v)
	}
	b, err := json.Marshal(s.definitions().Export(req.GetVhost()))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "definitions: %v", err)
	}
	return &proto.ExportDefinitionsResponse{Definitions: b}, nil
}

// ImportDefinitions implements proto.Server. Objects that could not be
// applied make it InvalidArgument, naming each, as the management API's
// 400; the others stay applied, as there.
func (s *Server) ImportDefinitions(ctx context.Context, req *proto.ImportDefinitionsRequest) (*proto.ImportDefinitionsResponse, error) {
	if n := len(req.GetDefinitions()); n > mgmt.DefaultMaxBodyBytes {
		return nil, status.Errorf(codes.InvalidArgument, "definitions of %d bytes: at most %d are taken", n, mgmt.DefaultMaxBodyBytes)
	}
	if v := req.GetVhost(); v != "" && !s.vhostExists(v) {
		return nil, status.Errorf(codes.NotFound, "no vhost '%s'", v)
	}
	defs, err := mgmt.ParseDefinitions(bytes.NewReader(req.GetDefinitions()))
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	res := s.definitions().Import(ctx, defs, req.GetVhost())
	if len(res.Errors) > 0 {
		return nil, status.Errorf(codes.InvalidArgument, "%d objects could not be applied: %s", len(res.Errors), strings.Join(res.Errors, "; "))
	}
	return &proto.ImportDefinitionsResponse{Warnings: res.Warnings}, nil
}
