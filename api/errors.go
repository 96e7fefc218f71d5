package api

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/amqp/reply"
	"github.com/raftmq/raftmq/proto"
)

// resultError turns a command Result with a non-zero code into a gRPC
// status carrying the AMQP reply text; nil for success.
func resultError(r *proto.Result) error {
	if r.GetCode() == 0 {
		return nil
	}
	return status.Error(codeForResult(r.GetCode()), fmt.Sprintf("%d %s", r.GetCode(), r.GetText()))
}

// codeForResult maps an AMQP reply code to a gRPC code.
func codeForResult(c uint32) codes.Code {
	switch c {
	case reply.NotFound:
		return codes.NotFound
	case reply.PreconditionFailed, reply.ResourceLocked:
		return codes.FailedPrecondition
	case reply.AccessRefused:
		return codes.PermissionDenied
	case reply.NotImplemented:
		// A command kind some node of the cluster does not support yet.
		return codes.Unimplemented
	case reply.InternalError:
		// The leader refused a malformed command: a bug of the proposer.
		return codes.Internal
	default:
		return codes.Unknown
	}
}

// nodeError turns an error of the node (not a command result) into a gRPC
// status: a status passes through, a context error keeps its meaning, and
// anything else gets code c.
func nodeError(err error, c codes.Code, what string) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return status.Errorf(codes.DeadlineExceeded, "%s: %v", what, err)
	case errors.Is(err, context.Canceled):
		return status.Errorf(codes.Canceled, "%s: %v", what, err)
	}
	return status.Errorf(c, "%s: %v", what, err)
}
