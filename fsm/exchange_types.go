package fsm

import (
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

// Which exchange types a declare accepts at the log's level, and how an
// exchange of each routes. The picking types' rules are in apply_pick.go.

// DelayedExchangeType is the exchange type of the delayed-message plugin:
// a message published with an x-delay header waits in the exchange, in
// the log's state, until log time reaches its due time, and is then routed
// as the exchange's x-delayed-type routes, with the bindings of that time.
const DelayedExchangeType = "x-delayed-message"

// validType reports whether t is one of RabbitMQ's own routing types.
func validType(t string) bool {
	switch t {
	case "direct", "fanout", "topic", "headers":
		return true
	}
	return false
}

// delayedType reports whether t is the delayed exchange type and the log
// has the level that knows it.
func (s *state) delayedType(t string) bool {
	return t == DelayedExchangeType && s.atLeast(levelDelayed)
}

// delayedVia checks a new delayed exchange's x-delayed-type and returns
// it, as the plugin's validate does: missing, not a string, or itself
// x-delayed-message is 406; an unknown type is what declaring an exchange
// of that type would answer. "" for other exchange types.
func delayedVia(typ string, args *proto.Table) (string, *proto.Result) {
	if typ != DelayedExchangeType {
		return "", nil
	}
	v, ok := tableGet(args, "x-delayed-type")
	var t string
	if ok {
		if lv, isLong := v.GetKind().(*proto.Value_LongString); isLong {
			t = string(lv.LongString)
		} else {
			ok = false
		}
	}
	switch {
	case !ok:
		return "", refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must be an existing exchange type")
	case t == DelayedExchangeType:
		return "", refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'")
	case !validType(t):
		return "", refused(replycode.CommandInvalid, "COMMAND_INVALID - unknown exchange type '"+t+"'")
	}
	return t, nil
}

// restoredVia is delayedVia for an exchange read from a snapshot: it was
// accepted when declared.
func restoredVia(x *exchange) string {
	if x.typ != DelayedExchangeType {
		return ""
	}
	if v, ok := tableGet(x.args, "x-delayed-type"); ok {
		if t, ok := valueString(v); ok && validType(t) {
			return t
		}
	}
	return "direct"
}

// routingType is the type x routes as: a delayed exchange's
// x-delayed-type, else its own.
func (x *exchange) routingType() string {
	if x.via != "" {
		return x.via
	}
	return x.typ
}
