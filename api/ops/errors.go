package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

// Kind is what went wrong with an operation, in the terms every front end
// answers in: the gRPC service turns it into a status code, the
// management API into an HTTP status.
type Kind int

// Kinds of failure.
const (
	// Unknown is a refusal the state machine gave no closer kind to (a
	// reply code such as 530 NOT_ALLOWED or 503 COMMAND_INVALID), or a
	// peer's answer of a kind not listed here.
	Unknown Kind = iota
	// Invalid: the request itself is malformed (an empty name, a pattern
	// that does not compile).
	Invalid
	// NotFound: the object, node or connection does not exist.
	NotFound
	// Exists: the object to create is there already.
	Exists
	// Denied: the state machine refused access (403 ACCESS_REFUSED), or a
	// peer refused the caller.
	Denied
	// Unauthenticated: a peer did not accept the caller's credentials.
	Unauthenticated
	// Precondition: the state does not allow it now (406
	// PRECONDITION_FAILED, 405 RESOURCE_LOCKED, a leadership transfer that
	// raft refused).
	Precondition
	// Unavailable: no leader, or the node could not reach it.
	Unavailable
	// Timeout: the caller's deadline passed.
	Timeout
	// Canceled: the caller gave up.
	Canceled
	// Unimplemented: a command some node of the cluster cannot apply yet
	// (540 NOT_IMPLEMENTED).
	Unimplemented
	// Internal: a bug, such as a malformed command (541 INTERNAL_ERROR).
	Internal
)

// Error is a failed operation. A command the state machine refused carries
// its AMQP reply code and RabbitMQ's reply text ("NOT_FOUND - no queue 'q'
// in vhost '/'"), so no front end reads a code back out of text.
type Error struct {
	Kind Kind
	// Code is the reply code of a refused command (package reply); 0 for
	// any other failure.
	Code uint16
	// Text is the reply text of a refusal, or what went wrong.
	Text string
}

// Error is the text, behind the reply code when there is one
// ("404 NOT_FOUND - ...").
func (e *Error) Error() string {
	if e.Code != 0 {
		return fmt.Sprintf("%d %s", e.Code, e.Text)
	}
	return e.Text
}

// Detail is the reply text after the code's name ("no queue 'q' in vhost
// '/'" of "NOT_FOUND - no queue 'q' in vhost '/'"), the reason RabbitMQ's
// management API gives; the text itself for a failure without a code.
func (e *Error) Detail() string {
	if e.Code == 0 {
		return e.Text
	}
	return strings.TrimPrefix(e.Text, replycode.Name(e.Code)+" - ")
}

// fail returns an *Error of kind k.
func fail(k Kind, format string, a ...any) *Error {
	return &Error{Kind: k, Text: fmt.Sprintf(format, a...)}
}

// refusal is a command Result with a non-zero code as an *Error; nil for
// success.
func refusal(r *proto.Result) error {
	if r.GetCode() == 0 {
		return nil
	}
	c := uint16(r.GetCode())
	return &Error{Kind: replyKind(c), Code: c, Text: r.GetText()}
}

// replyKind is the kind of a refusal with reply code c.
func replyKind(c uint16) Kind {
	switch c {
	case replycode.NotFound:
		return NotFound
	case replycode.PreconditionFailed, replycode.ResourceLocked:
		return Precondition
	case replycode.AccessRefused:
		return Denied
	case replycode.NotImplemented:
		return Unimplemented
	case replycode.InternalError:
		return Internal
	}
	return Unknown
}

// nodeError turns an error of the node (not a command result) into an
// *Error: an *Error passes through, a peer's status keeps its kind, a
// context error keeps its meaning, and anything else gets kind k.
func nodeError(err error, k Kind, what string) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	if _, ok := status.FromError(err); ok {
		return peerError(err)
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fail(Timeout, "%s: %v", what, err)
	case errors.Is(err, context.Canceled):
		return fail(Canceled, "%s: %v", what, err)
	}
	return fail(k, "%s: %v", what, err)
}

// grpcCodes pairs each kind with its gRPC status code: the Admin service
// answers with it, and a peer's answer is read back with it.
var grpcCodes = [...]codes.Code{
	Unknown:         codes.Unknown,
	Invalid:         codes.InvalidArgument,
	NotFound:        codes.NotFound,
	Exists:          codes.AlreadyExists,
	Denied:          codes.PermissionDenied,
	Unauthenticated: codes.Unauthenticated,
	Precondition:    codes.FailedPrecondition,
	Unavailable:     codes.Unavailable,
	Timeout:         codes.DeadlineExceeded,
	Canceled:        codes.Canceled,
	Unimplemented:   codes.Unimplemented,
	Internal:        codes.Internal,
}

// GRPCCode is the gRPC status code of kind k.
func (k Kind) GRPCCode() codes.Code {
	if k < 0 || int(k) >= len(grpcCodes) {
		return codes.Unknown
	}
	return grpcCodes[k]
}

// peerError reads another node's Admin answer (a gRPC status) back as an
// *Error of the same kind, its message as the text; an error that is no
// status (a dial failure) passes through.
func peerError(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	k := Unknown
	for i, c := range grpcCodes {
		if c == st.Code() {
			k = Kind(i)
			break
		}
	}
	return &Error{Kind: k, Text: st.Message()}
}
