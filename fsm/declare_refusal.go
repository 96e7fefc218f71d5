package fsm

import (
	"slices"
	"strconv"

	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

// DeclareRefusal is RabbitMQ's refusal of queue declare d for what the
// declare says on its own, whatever the queues are: a dead-letter routing
// key without a dead-letter exchange, a queue mode other than default or
// lazy, and a quorum queue that is exclusive, auto-delete or not durable.
// nil lets the declare go on to the log.
//
// It is checked where a declare enters (cluster/broker), not when the log
// applies it: logs written before these refusals hold declares they let
// through, and a replica replaying them must make the queue the others
// made from the same entry.
func DeclareRefusal(d *proto.QueueDeclare) *proto.Result {
	if d.GetPassive() {
		return nil
	}
	q := &queueState{queueIdentity: queueIdentity{vhost: d.GetVhost(), name: d.GetName()}}
	args := d.GetArguments()
	if _, ok := tableGet(args, "x-dead-letter-routing-key"); ok {
		if _, ok := tableGet(args, "x-dead-letter-exchange"); !ok {
			return invalidArg("x-dead-letter-routing-key", q, "routing_key_but_no_dlx_defined")
		}
	}
	quorum := false
	if v, ok := tableGet(args, "x-queue-type"); ok {
		t, _ := valueString(v)
		quorum = t == "quorum"
	}
	if v, ok := tableGet(args, "x-queue-mode"); ok && !quorum {
		mode, ok := valueString(v)
		switch {
		case !ok:
			return invalidArg("x-queue-mode", q, "{unacceptable_type,"+typeName(v)+"}")
		case mode != "default" && mode != "lazy":
			return invalidArg("x-queue-mode", q, `"unsupported queue mode '`+mode+`'"`)
		}
	}
	if !quorum {
		return nil
	}
	// RabbitMQ's quorum queue checks these properties in this order.
	for _, p := range []struct {
		set  bool
		name string
	}{{d.GetAutoDelete(), "auto-delete"}, {d.GetExclusive(), "exclusive-owner"}, {!d.GetDurable(), "non-durable"}} {
		if p.set {
			return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - invalid property '"+p.name+"' for "+rs("queue", q.name, q.vhost))
		}
	}
	return nil
}

// TypeName is the AMQP name of v's type as RabbitMQ's refusals give it
// (longstr, signedint, bool, ...).
func TypeName(v *proto.Value) string { return typeName(v) }

// headersMatchModes are the x-match values a headers exchange knows.
var headersMatchModes = []string{"all", "any", "all-with-x", "any-with-x"}

// BindRefusal is RabbitMQ's refusal of binding b to a headers exchange
// with an x-match it does not know, or of another type than a string,
// judged on the exchanges m holds. nil lets the bind go on to the log,
// also when m does not hold the exchange (yet).
//
// Like DeclareRefusal it is checked before the log, not in apply, so
// that logs holding binds it let through replay alike: by the node the
// bind came in on, against its own state, and again by the leader as the
// bind enters an entry, against the leader's (cluster/group), which
// holds an exchange a client was told was declared.
func (m *Machine) BindRefusal(b *proto.Bind) *proto.Result {
	v, ok := tableGet(b.GetArguments(), "x-match")
	if !ok {
		return nil
	}
	vh, ok := m.vhosts[b.GetVhost()]
	if !ok {
		return nil
	}
	if x, ok := vh.exchanges[b.GetSource()]; !ok || x.typ != "headers" {
		return nil
	}
	mode, ok := valueString(v)
	switch {
	case !ok:
		return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - Invalid x-match field type "+typeName(v)+" (value "+describeBare(v)+"); expected longstr")
	case !slices.Contains(headersMatchModes, mode):
		return refused(replycode.PreconditionFailed, `PRECONDITION_FAILED - Invalid x-match field value <<"`+mode+`">>; expected all, any, all-with-x, or any-with-x`)
	}
	return nil
}

// describeBare is a value as an Erlang term prints it in a refusal: an
// integer or a boolean by itself, anything else as "?".
func describeBare(v *proto.Value) string {
	switch x := valueAny(v).(type) {
	case int64:
		return strconv.FormatInt(x, 10)
	case bool:
		return boolText(x)
	}
	return "?"
}
