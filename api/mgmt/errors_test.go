package mgmt

import (
	"errors"
	"net/http"
	"testing"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/internal/replycode"
)

// An operation's error becomes RabbitMQ's HTTP answer by its kind and
// reply code; the reason of a refusal is the reply text after the code's
// name, as RabbitMQ's management API gives it.
func TestFromError(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
		reason string
	}{
		{&ops.Error{Kind: ops.NotFound, Code: replycode.NotFound, Text: "NOT_FOUND - no queue 'q' in vhost '/'"}, http.StatusNotFound, "Not Found"},
		{&ops.Error{Kind: ops.Precondition, Code: replycode.PreconditionFailed, Text: "PRECONDITION_FAILED - in use"}, http.StatusBadRequest, "in use"},
		{&ops.Error{Kind: ops.Denied, Code: replycode.AccessRefused, Text: "ACCESS_REFUSED - reserved"}, http.StatusBadRequest, "reserved"},
		{&ops.Error{Kind: ops.Denied, Text: "user \"joe\" is not tagged administrator"}, http.StatusUnauthorized, "user \"joe\" is not tagged administrator"},
		{&ops.Error{Kind: ops.Unknown, Code: replycode.NotAllowed, Text: "NOT_ALLOWED - tag"}, http.StatusBadRequest, "tag"},
		{&ops.Error{Kind: ops.Invalid, Text: "queue name must not be empty"}, http.StatusBadRequest, "queue name must not be empty"},
		{&ops.Error{Kind: ops.Unavailable, Text: "no leader is known"}, http.StatusServiceUnavailable, "no leader is known"},
		{&ops.Error{Kind: ops.Internal, Code: replycode.InternalError, Text: "INTERNAL_ERROR - bug"}, http.StatusInternalServerError, "541 INTERNAL_ERROR - bug"},
		{errors.New("odd"), http.StatusInternalServerError, "odd"},
	} {
		he := fromError(c.err)
		if he.status != c.status || he.reason != c.reason {
			t.Errorf("%v: %d %q, want %d %q", c.err, he.status, he.reason, c.status, c.reason)
		}
	}
}
