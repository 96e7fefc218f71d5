package ops

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

// A refused command is an *Error carrying its reply code and text, of the
// kind its code says; success is no error.
func TestRefusal(t *testing.T) {
	if err := refusal(&proto.Result{}); err != nil {
		t.Fatalf("success refused: %v", err)
	}
	for code, kind := range map[uint16]Kind{
		replycode.NotFound: NotFound, replycode.PreconditionFailed: Precondition, replycode.ResourceLocked: Precondition,
		replycode.AccessRefused: Denied, replycode.NotImplemented: Unimplemented, replycode.InternalError: Internal,
		replycode.NotAllowed: Unknown, replycode.CommandInvalid: Unknown,
	} {
		text := replycode.Name(code) + " - why"
		var e *Error
		if !errors.As(refusal(&proto.Result{Code: uint32(code), Text: text}), &e) || e.Kind != kind || e.Code != code || e.Text != text {
			t.Errorf("%d: %#v, want kind %d", code, e, kind)
		}
		if e != nil && e.Error() != fmt.Sprintf("%d %s", code, text) {
			t.Errorf("%d: Error() = %q", code, e.Error())
		}
	}
}

// Every kind survives the trip to a peer and back as a gRPC status, and a
// node's own failure keeps what a context error means.
func TestKinds_ThroughStatus(t *testing.T) {
	for k := Unknown; k <= Internal; k++ {
		sent := status.Error(k.GRPCCode(), "text")
		var e *Error
		if !errors.As(peerError(sent), &e) || e.Kind != k || e.Text != "text" || e.Code != 0 {
			t.Errorf("kind %d came back as %#v", k, e)
		}
	}
	if got := peerError(status.Error(codes.ResourceExhausted, "x")).(*Error).Kind; got != Unknown {
		t.Errorf("an unlisted code is kind %d", got)
	}
	plain := errors.New("dial: refused")
	if peerError(plain) != plain || peerError(nil) != nil {
		t.Error("an error that is no status must pass through")
	}
	for err, kind := range map[error]Kind{
		context.DeadlineExceeded:              Timeout,
		fmt.Errorf("x: %w", context.Canceled): Canceled,
		errors.New("disk full"):               Unavailable,
	} {
		var e *Error
		if !errors.As(nodeError(err, Unavailable, "submit"), &e) || e.Kind != kind {
			t.Errorf("%v: %#v, want kind %d", err, e, kind)
		}
	}
}
