package fsm

import (
	"fmt"
	"math"
	"strings"
	"sync"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

// Limits of what a command may carry. Names are AMQP short strings; the
// other bounds are far above anything the broker produces and only keep a
// hostile proposer from making every replica do unbounded work.
const (
	// MaxNameLen bounds every name, key and id (vhost, exchange, queue,
	// routing key, consumer tag, user, policy, node, connection, table
	// key, short-string property).
	MaxNameLen = 255
	// MaxPatternLen bounds regular expressions (permissions, policies).
	MaxPatternLen = 4096
	// MaxTextLen bounds free text (a vhost's description, a password hash).
	MaxTextLen = 64 << 10
	// MaxListLen bounds repeated fields (delivery tags, queues of an
	// Expire, user tags, table fields, array values).
	MaxListLen = 1 << 22
	// MaxTableDepth bounds the nesting of field tables and arrays.
	MaxTableDepth = 64
	// MaxBodySize is the largest message body a node may be configured to
	// accept, and the default of Limits.MaxBody: 128 MiB, RabbitMQ 3's
	// default. RabbitMQ allows up to 512 MiB, but a publish that large is
	// held several times in each node's memory while it commits, and on
	// the reference machine (2 cores) it starved heartbeats into repeated
	// elections; 128 MiB commits and survives restarts there
	// (docs/operations.md, Limits). Only checked before the log: entries an
	// earlier release accepted still apply.
	MaxBodySize = 128 << 20
)

// Limits are the bounds of Validate that depend on the node's
// configuration.
type Limits struct {
	// MaxBody is the largest publish body accepted (0: MaxBodySize).
	MaxBody int
}

// InvalidError is why Validate refused a command: an AMQP reply code
// (406 for a limit exceeded, 541 for a malformed command, 540 for a kind
// the cluster does not support yet) and RabbitMQ-style text.
type InvalidError struct {
	Code uint32
	Text string
}

func (e *InvalidError) Error() string { return e.Text }

// Result is the refusal as a command result.
func (e *InvalidError) Result() *proto.Result { return refused(e.Code, e.Text) }

// Protocol is the highest command protocol this binary applies: it knows
// every command kind of that version and earlier, and applies the
// existing kinds as every level up to it defines them (the log's level,
// raised by SetProtocol). Nodes gossip it.
//
//  1. the first release
//  2. SetProtocol; a channel created after others were removed numbers its
//     deliveries above theirs (tagFloor)
//  3. queues declared from this level on have priorities, delivery limits
//     (default 20), single active consumer, consumer priorities, and
//     refuse stream arguments (features.go); queues declared before keep
//     what they were
//  4. ConsumerTimeout; deliveries record when they were assigned, a
//     queue declared from this level on refuses an invalid
//     x-consumer-timeout, and a policy an invalid consumer-timeout
//  5. deaths are counted by reason and dead-letter strategy (Stats.Deaths)
//  6. x-delayed-message exchanges, ReleaseDelayed, CancelDelayed and
//     PurgeDelayed (apply_delayed.go)
//  7. a consumer's lookahead credit (beyond its prefetch) is used only
//     while its channel settled or was first assigned something within
//     LookaheadIdleMs of log time (lookahead.go)
//  8. queues declared from this level on count returns as RabbitMQ 4.3
//     (acquired-count, delivery-count; the delivery limit on the
//     latter) and have delayed retry; ReleaseDelayed releases their
//     waiting messages; Requeue.failed and the delayed-retry policy keys
//     (apply_retry.go)
//  9. a delayed exchange keeps a message's properties with its x-delay
//     value left out, so messages alike but for their delays share one
//     table entry (heldProps, apply_delayed.go)
//  10. a consumer timeout cancels the consumer whose delivery timed out
//     and returns its deliveries; the channel and its other consumers
//     stay (consumer_timeout.go)
//  11. x-consistent-hash, x-modulus-hash and x-local-random exchanges
//     (apply_pick.go)
//  12. VhostLimits: virtual host limits (vhost_limits.go)
//  13. queue groups: GroupInit, Enqueue, HandOff and HandOffDone; a
//     queue group's outbox (groups.go)
//  14. Credit: a consumer's credit set while it consumes (apply_credit.go)
//  15. QueueGroups: the queue groups a cluster runs (queue_groups.go)
//  16. GroupMembers: a queue group's members set (queue_groups.go)
//  17. PlaceQueues: new queues placed in queue groups; the metadata
//     log's copies to them leave through its outbox (placement.go)
//  18. x-quorum-initial-group-size checked, and honoured by placement
//     (group_size.go)
//  19. HandOff.route_keys: a hand-off routed in the target's log, so
//     that a delayed exchange there holds it (groups.go)
//  20. x-queue-leader-locator checked, and client-local honoured by
//     placement (leader_locator.go)
//  21. a policy's queue-leader-locator checked, and winning over the
//     argument at placement (leader_locator.go)
//  22. ChannelClosed.seen and ConnectionClosed.seen: a closing channel
//     names what its client was sent, the rest returns unflagged
//     (apply_consume.go)
//  23. QueueLeaseEnded and QueueDeclare.placed_at: a queue group runs
//     the leases of its queues, policies' included, and the metadata
//     log deletes a queue whose lease ended there (lease.go)
//  24. a queue with its own x-expires is placed in a queue group, where
//     its lease runs (placement.go)
//  25. Credit.prefetch: a basic.qos changes the prefetch of the channel's
//     consumers while they consume (apply_credit.go)
const Protocol = 25

// kindProtocol is the protocol version that introduced each command kind
// (by its field number in Command's oneof). A kind is proposed only once
// every server of the raft configuration announces that version, so a
// replica never meets a kind it does not know during a rolling upgrade.
// Every kind of the first release is version 1.
var kindProtocol = map[protoreflect.FieldNumber]uint32{}

func init() {
	for i := 0; i < cmdOneof.Fields().Len(); i++ {
		kindProtocol[cmdOneof.Fields().Get(i).Number()] = 1
	}
	kindProtocol[cmdOneof.Fields().ByName("set_protocol").Number()] = levelTagFloor
	kindProtocol[cmdOneof.Fields().ByName("consumer_timeout").Number()] = levelConsumerTimeout
	kindProtocol[cmdOneof.Fields().ByName("release_delayed").Number()] = levelDelayed
	kindProtocol[cmdOneof.Fields().ByName("cancel_delayed").Number()] = levelDelayed
	kindProtocol[cmdOneof.Fields().ByName("purge_delayed").Number()] = levelDelayed
	kindProtocol[cmdOneof.Fields().ByName("vhost_limits").Number()] = levelVhostLimits
	for _, k := range []protoreflect.Name{"group_init", "enqueue", "hand_off", "hand_off_done"} {
		kindProtocol[cmdOneof.Fields().ByName(k).Number()] = levelGroups
	}
	kindProtocol[cmdOneof.Fields().ByName("credit").Number()] = levelCredit
	kindProtocol[cmdOneof.Fields().ByName("queue_groups").Number()] = levelQueueGroups
	kindProtocol[cmdOneof.Fields().ByName("group_members").Number()] = levelGroupMembers
	kindProtocol[cmdOneof.Fields().ByName("place_queues").Number()] = levelPlacement
	kindProtocol[cmdOneof.Fields().ByName("queue_lease_ended").Number()] = levelLeases
}

// CommandProtocol is the protocol version a command's kind needs, 0 for a
// command of no kind this binary knows. Fields added to a kind later need
// their level too: a server of an earlier release refuses a field it does
// not know.
func CommandProtocol(c *proto.Command) uint32 {
	f := c.ProtoReflect().WhichOneof(cmdOneof)
	if f == nil {
		return 0
	}
	if retryFields(c) {
		return levelRetry
	}
	if c.GetChannelClosed().GetSeenListed() || c.GetConnectionClosed().GetSeenListed() {
		return levelSeenAtClose
	}
	if c.GetQueueDeclare().GetPlacedAt() != 0 {
		return levelLeases
	}
	if cr := c.GetCredit(); cr != nil && cr.Prefetch != nil {
		return levelQos
	}
	return kindProtocol[f.Number()]
}

// WithoutSeen is a copy of a ChannelClosed or ConnectionClosed that
// names what its client saw (level 22) without that list, for a log below
// the level; nil for any other command.
func WithoutSeen(c *proto.Command) *proto.Command {
	switch {
	case c.GetChannelClosed().GetSeenListed():
		return &proto.Command{Cmd: &proto.Command_ChannelClosed{ChannelClosed: &proto.ChannelClosed{Channel: c.GetChannelClosed().GetChannel()}}}
	case c.GetConnectionClosed().GetSeenListed():
		return &proto.Command{Cmd: &proto.Command_ConnectionClosed{ConnectionClosed: &proto.ConnectionClosed{
			Connection: c.GetConnectionClosed().GetConnection()}}}
	}
	return nil
}

// retryFields reports whether c sets a field of level 8: Requeue.failed
// or a delayed-retry policy key.
func retryFields(c *proto.Command) bool {
	if c.GetRequeue().GetFailed() {
		return true
	}
	d := c.GetPolicySet().GetDefinition()
	return d != nil && (d.DelayedRetryType != nil || d.DelayedRetryMin != nil || d.DelayedRetryMax != nil || d.DelayedRetryMultiplier != nil)
}

var cmdOneof = (&proto.Command{}).ProtoReflect().Descriptor().Oneofs().ByName("cmd")

// Validate checks a command before it is proposed: a kind this binary
// knows, its message present, no fields it does not know, required names
// and ids set, and names, lists, tables and the body within bounds. It is
// pure; the leader runs it on every command, local or forwarded, so the
// log holds only what every replica can apply.
func Validate(c *proto.Command, lim Limits) error {
	if c == nil {
		return malformed("no command")
	}
	v := &validator{maxBody: lim.MaxBody}
	if v.maxBody <= 0 || v.maxBody > MaxBodySize {
		v.maxBody = MaxBodySize
	}
	if f := c.ProtoReflect().WhichOneof(cmdOneof); f == nil {
		if len(c.ProtoReflect().GetUnknown()) > 0 {
			return malformed("command of an unknown kind")
		}
		return malformed("command of no kind")
	}
	if shapeError(c) != nil {
		return malformed("command of kind " + kindName(c) + " without its message")
	}
	unknown, walked := messageKindHasUnknown(c)
	if !walked {
		unknown = hasUnknown(c.ProtoReflect(), 0)
	}
	if unknown {
		return malformed("command of kind " + kindName(c) + " with fields this node does not know")
	}
	v.command(c)
	if v.err != nil {
		return v.err
	}
	return nil
}

func kindName(c *proto.Command) string {
	if f := c.ProtoReflect().WhichOneof(cmdOneof); f != nil {
		return string(f.Name())
	}
	return "none"
}

func malformed(text string) *InvalidError {
	return &InvalidError{Code: replycode.InternalError, Text: "INTERNAL_ERROR - invalid command: " + text}
}

// Unsupported is the refusal of a command whose kind needs protocol
// version need while some server of the cluster announces only have.
func Unsupported(c *proto.Command, need, have uint32) *InvalidError {
	return &InvalidError{Code: replycode.NotImplemented, Text: fmt.Sprintf(
		"NOT_IMPLEMENTED - command %s needs protocol version %d, and a node of the cluster supports only %d",
		kindName(c), need, have)}
}

// shapeError reports a command whose oneof is set to a nil message. The
// decoder never produces one, but a command built in memory may, and
// apply refuses it rather than dereference it.
func shapeError(c *proto.Command) *proto.Result {
	// The kinds that come once per message, without reflection.
	switch x := c.GetCmd().(type) {
	case *proto.Command_Publish:
		if x.Publish != nil {
			return nil
		}
	case *proto.Command_Settle:
		if x.Settle != nil {
			return nil
		}
	}
	m := c.ProtoReflect()
	f := m.WhichOneof(cmdOneof)
	if f == nil {
		return nil
	}
	if !m.Get(f).Message().IsValid() {
		return malformed("command of kind " + string(f.Name()) + " without its message").Result()
	}
	return nil
}

// hasUnknown reports fields this binary does not know anywhere in m. It
// descends only into the message fields set (the oneofs through their one
// member), not through every field as protoreflect's Range would: a
// publish's walk was a tenth of the leader's CPU spent validating.
func hasUnknown(m protoreflect.Message, depth int) bool {
	if len(m.GetUnknown()) > 0 {
		return true
	}
	if depth > 2*MaxTableDepth+8 {
		// Deeper than any valid command; the table check refuses it.
		return false
	}
	// A table's and an array's one message field is a list, which
	// protoreflect hands out in a wrapper allocated for each: walked
	// directly they cost a publish with headers no allocation. Fields and
	// values are walked directly too, which protoreflect's Has, Get and
	// WhichOneof made most of a publish's validation.
	switch x := m.Interface().(type) {
	case *proto.Table:
		for _, e := range x.GetFields() {
			if hasUnknown(e.ProtoReflect(), depth+1) {
				return true
			}
		}
		return false
	case *proto.Array:
		for _, e := range x.GetValues() {
			if hasUnknown(e.ProtoReflect(), depth+1) {
				return true
			}
		}
		return false
	case *proto.Field:
		// A header's value, and the value's table, array or decimal,
		// likewise: every header of every publish goes through here.
		if v := x.GetValue(); v != nil {
			return hasUnknown(v.ProtoReflect(), depth+1)
		}
		return false
	case *proto.Value:
		switch k := x.GetKind().(type) {
		case *proto.Value_Table:
			return k.Table != nil && hasUnknown(k.Table.ProtoReflect(), depth+1)
		case *proto.Value_Array:
			return k.Array != nil && hasUnknown(k.Array.ProtoReflect(), depth+1)
		case *proto.Value_Decimal:
			return unknownIn(k.Decimal)
		}
		return false
	}
	f := messageFieldsOf(m.Descriptor())
	for _, fd := range f.fields {
		if !m.Has(fd) {
			continue
		}
		if fd.IsList() {
			l := m.Get(fd).List()
			for i := 0; i < l.Len(); i++ {
				if hasUnknown(l.Get(i).Message(), depth+1) {
					return true
				}
			}
			continue
		}
		if hasUnknown(m.Get(fd).Message(), depth+1) {
			return true
		}
	}
	for _, od := range f.oneofs {
		if fd := m.WhichOneof(od); fd != nil && isMessage(fd) && hasUnknown(m.Get(fd).Message(), depth+1) {
			return true
		}
	}
	return false
}

// messageKindHasUnknown is hasUnknown for the kinds that come once per
// message (a publish, an enqueue, an ack), walked through their generated
// types: protoreflect's Has and Get on each field were three quarters of a
// publish's validation. walked is false for every other kind.
// TestMessageKindHasUnknown_WalksEveryMessageField fails when one of the
// types walked here gains a message field, which this walk would miss.
func messageKindHasUnknown(c *proto.Command) (unknown, walked bool) {
	switch x := c.GetCmd().(type) {
	case *proto.Command_Publish:
		p := x.Publish
		return unknownIn(c) || unknownIn(p) || unknownIn(p.GetChannel()) || propertiesHaveUnknown(p.GetProperties()), true
	case *proto.Command_Enqueue:
		e := x.Enqueue
		return unknownIn(c) || unknownIn(e) || unknownIn(e.GetChannel()) || propertiesHaveUnknown(e.GetProperties()), true
	case *proto.Command_Settle:
		st := x.Settle
		return unknownIn(c) || unknownIn(st) || unknownIn(st.GetChannel()), true
	}
	return false, false
}

// propertiesHaveUnknown reports unknown fields in p or its headers, which
// sit at depth 3 of a command (command, publish, properties, table).
func propertiesHaveUnknown(p *proto.Properties) bool {
	return unknownIn(p) || p.GetHeaders() != nil && hasUnknown(p.GetHeaders().ProtoReflect(), 3)
}

// unknownIn reports whether m, a generated message or nil, holds fields
// this binary does not know (not looking into its message fields).
func unknownIn[M interface {
	comparable
	ProtoReflect() protoreflect.Message
}](m M) bool {
	var none M
	return m != none && len(m.ProtoReflect().GetUnknown()) > 0
}

// messageFields are the fields of a message type that hold messages: those
// outside oneofs (lists included, maps not) and the oneofs with a message
// member.
type messageFields struct {
	fields []protoreflect.FieldDescriptor
	oneofs []protoreflect.OneofDescriptor
}

var messageFieldsCache sync.Map // protoreflect.MessageDescriptor -> *messageFields

func messageFieldsOf(d protoreflect.MessageDescriptor) *messageFields {
	if f, ok := messageFieldsCache.Load(d); ok {
		return f.(*messageFields)
	}
	f := &messageFields{}
	fds := d.Fields()
	for i := 0; i < fds.Len(); i++ {
		if fd := fds.Get(i); isMessage(fd) && !fd.IsMap() && fd.ContainingOneof() == nil {
			f.fields = append(f.fields, fd)
		}
	}
	ods := d.Oneofs()
	for i := 0; i < ods.Len(); i++ {
		od := ods.Get(i)
		for k := 0; k < od.Fields().Len(); k++ {
			if isMessage(od.Fields().Get(k)) {
				f.oneofs = append(f.oneofs, od)
				break
			}
		}
	}
	g, _ := messageFieldsCache.LoadOrStore(d, f)
	return g.(*messageFields)
}

func isMessage(fd protoreflect.FieldDescriptor) bool {
	return fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind
}

type validator struct {
	maxBody int
	err     *InvalidError
}

func (v *validator) fail(code uint32, format string, args ...any) {
	if v.err == nil {
		prefix := "PRECONDITION_FAILED - "
		switch code {
		case replycode.InternalError:
			prefix = "INTERNAL_ERROR - invalid command: "
		case replycode.NotImplemented:
			prefix = "NOT_IMPLEMENTED - "
		}
		v.err = &InvalidError{Code: code, Text: prefix + fmt.Sprintf(format, args...)}
	}
}

// name checks a short string; required ones must not be empty.
func (v *validator) name(what, s string, required bool) {
	switch {
	case required && s == "":
		v.fail(replycode.InternalError, "%s is empty", what)
	case len(s) > MaxNameLen:
		v.fail(replycode.PreconditionFailed, "%s is %d bytes long, longer than %d", what, len(s), MaxNameLen)
	}
}

// nameOf checks a name as name does, labelled by the parts of what joined:
// the label is built only for a refusal, not for every message checked.
func (v *validator) nameOf(s string, required bool, what ...string) {
	if (required && s == "") || len(s) > MaxNameLen {
		v.name(strings.Join(what, ""), s, required)
	}
}

func (v *validator) text(what, s string, max int) {
	if len(s) > max {
		v.fail(replycode.PreconditionFailed, "%s is %d bytes long, longer than %d", what, len(s), max)
	}
}

func (v *validator) list(what string, n int) {
	if n > MaxListLen {
		v.fail(replycode.PreconditionFailed, "%s has %d elements, more than %d", what, n, MaxListLen)
	}
}

func (v *validator) connection(what string, r *proto.ConnectionRef, required bool) {
	if r == nil {
		if required {
			v.fail(replycode.InternalError, "%s is missing", what)
		}
		return
	}
	v.nameOf(r.GetNode(), true, what, " node")
	v.nameOf(r.GetConnection(), true, what, " id")
}

func (v *validator) channel(what string, r *proto.ChannelRef) { v.channelOf(r, what, "") }

// channelOf checks a channel reference labelled what+sub.
func (v *validator) channelOf(r *proto.ChannelRef, what, sub string) {
	if r == nil {
		v.fail(replycode.InternalError, "%s%s is missing", what, sub)
		return
	}
	v.nameOf(r.GetNode(), true, what, sub, " node")
	v.nameOf(r.GetConnection(), true, what, sub, " connection")
	if r.GetChannel() > math.MaxUint16 {
		v.fail(replycode.InternalError, "%s%s number %d is out of range", what, sub, r.GetChannel())
	}
}

func (v *validator) consumer(what string, r *proto.ConsumerRef) {
	if r == nil {
		v.fail(replycode.InternalError, "%s is missing", what)
		return
	}
	v.channelOf(r.GetChannel(), what, " channel")
	v.nameOf(r.GetTag(), false, what, " tag")
}

// queueRef checks a queue the leader names from the state (Expire,
// ExpireQueue). Only presence is checked: a name longer than today's
// limit that an earlier version let in must still expire, and one
// refused name would hold back the expiry of every queue listed with it.
func (v *validator) queueRef(what string, r *proto.QueueRef) {
	switch {
	case r == nil:
		v.fail(replycode.InternalError, "%s is missing", what)
	case r.GetVhost() == "":
		v.fail(replycode.InternalError, "%s vhost is empty", what)
	case r.GetName() == "":
		v.fail(replycode.InternalError, "%s name is empty", what)
	}
}

func (v *validator) table(what string, t *proto.Table, depth int) {
	if t == nil || v.err != nil {
		return
	}
	if depth > MaxTableDepth {
		v.fail(replycode.PreconditionFailed, "%s nests deeper than %d", what, MaxTableDepth)
		return
	}
	v.list(what, len(t.GetFields()))
	for _, f := range t.GetFields() {
		if f == nil {
			v.fail(replycode.InternalError, "%s has a nil field", what)
			return
		}
		if len(f.GetKey()) <= MaxNameLen && v.valueOK(f.GetValue(), depth) {
			// The names below, for the refusal, are built only for one:
			// they were most of the check of a publish with headers.
			continue
		}
		v.name(what+" key", f.GetKey(), false)
		v.value(what+" field '"+truncate(f.GetKey())+"'", f.GetValue(), depth)
		if v.err != nil {
			return
		}
	}
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// valueOK reports whether value would find nothing wrong with x. It checks
// with v itself and puts back v's own finding: a validator of its own
// escaped to the heap for every header.
func (v *validator) valueOK(x *proto.Value, depth int) bool {
	found := v.err
	v.err = nil
	v.value("", x, depth)
	ok := v.err == nil
	v.err = found
	return ok
}

// value checks that an AMQP field value has a kind and that its number
// fits the wire type it stands for.
func (v *validator) value(what string, x *proto.Value, depth int) {
	if x == nil {
		v.fail(replycode.InternalError, "%s has no value", what)
		return
	}
	inRange := func(n, lo, hi int64) {
		if n < lo || n > hi {
			v.fail(replycode.InternalError, "%s value %d does not fit its type", what, n)
		}
	}
	switch k := x.GetKind().(type) {
	case nil:
		v.fail(replycode.InternalError, "%s has no value", what)
	case *proto.Value_Int8:
		inRange(int64(k.Int8), math.MinInt8, math.MaxInt8)
	case *proto.Value_Uint8:
		inRange(int64(k.Uint8), 0, math.MaxUint8)
	case *proto.Value_Int16:
		inRange(int64(k.Int16), math.MinInt16, math.MaxInt16)
	case *proto.Value_Uint16:
		inRange(int64(k.Uint16), 0, math.MaxUint16)
	case *proto.Value_Decimal:
		if k.Decimal == nil {
			v.fail(replycode.InternalError, "%s has no value", what)
			return
		}
		inRange(int64(k.Decimal.GetScale()), 0, math.MaxUint8)
	case *proto.Value_ShortString:
		v.name(what, k.ShortString, false)
	case *proto.Value_Table:
		if k.Table == nil {
			v.fail(replycode.InternalError, "%s has no value", what)
			return
		}
		v.table(what, k.Table, depth+1)
	case *proto.Value_Array:
		if k.Array == nil {
			v.fail(replycode.InternalError, "%s has no value", what)
			return
		}
		if depth+1 > MaxTableDepth {
			v.fail(replycode.PreconditionFailed, "%s nests deeper than %d", what, MaxTableDepth)
			return
		}
		v.list(what, len(k.Array.GetValues()))
		for _, e := range k.Array.GetValues() {
			v.value(what+" element", e, depth+1)
			if v.err != nil {
				return
			}
		}
	}
}

func (v *validator) properties(p *proto.Properties) {
	if p == nil {
		return
	}
	for _, s := range []struct {
		what string
		v    *string
	}{
		{"content-type", p.ContentType}, {"content-encoding", p.ContentEncoding}, {"correlation-id", p.CorrelationId},
		{"reply-to", p.ReplyTo}, {"expiration", p.Expiration}, {"message-id", p.MessageId}, {"type", p.Type},
		{"user-id", p.UserId}, {"app-id", p.AppId}, {"cluster-id", p.ClusterId},
	} {
		if s.v != nil {
			v.nameOf(*s.v, false, "property ", s.what)
		}
	}
	if p.DeliveryMode != nil && p.GetDeliveryMode() > math.MaxUint8 {
		v.fail(replycode.InternalError, "delivery-mode %d is out of range", p.GetDeliveryMode())
	}
	if p.Priority != nil && p.GetPriority() > math.MaxUint8 {
		v.fail(replycode.InternalError, "priority %d is out of range", p.GetPriority())
	}
	v.table("headers", p.GetHeaders(), 0)
}

func (v *validator) tags(n int) { v.list("delivery tags", n) }

// seen checks a closing channel's seen deliveries: channel numbers in
// range, and each list of ranges pairs of tags, first at most last,
// ascending, within MaxListLen values in all.
func (v *validator) seen(ss []*proto.SeenDeliveries) {
	v.list("seen deliveries", len(ss))
	n := 0
	for _, s := range ss {
		if s.GetChannel() > math.MaxUint16 {
			v.fail(replycode.InternalError, "seen deliveries' channel number %d is out of range", s.GetChannel())
			return
		}
		r := s.GetRanges()
		if n += len(r); n > MaxListLen {
			v.list("seen delivery ranges", n)
			return
		}
		if len(r)%2 != 0 {
			v.fail(replycode.InternalError, "seen delivery ranges hold %d tags, not pairs", len(r))
			return
		}
		for i := 0; i < len(r); i += 2 {
			if r[i] > r[i+1] || i > 0 && r[i] <= r[i-1] {
				v.fail(replycode.InternalError, "seen delivery ranges are not ascending at %d-%d", r[i], r[i+1])
				return
			}
		}
	}
}

// command checks the fields of each kind. Names the state machine keys
// state by are required; names it resolves itself (an empty queue name
// for a server-named queue, an empty exchange for the default one, an
// empty consumer tag for a generated one) may be empty, and what apply
// refuses with RabbitMQ's own reply (an unknown exchange type, a
// reserved name) is left to it.
func (v *validator) command(c *proto.Command) {
	switch x := c.GetCmd().(type) {
	case *proto.Command_VhostPut:
		v.name("vhost name", x.VhostPut.GetName(), true)
		v.text("vhost description", x.VhostPut.GetDescription(), MaxTextLen)
	case *proto.Command_VhostDelete:
		v.name("vhost name", x.VhostDelete.GetName(), true)
	case *proto.Command_UserPut:
		u := x.UserPut
		v.name("user name", u.GetName(), true)
		v.text("password hash", string(u.GetPasswordHash()), MaxTextLen)
		v.name("hash algorithm", u.GetHashAlgorithm(), false)
		v.list("user tags", len(u.GetTags()))
		for _, t := range u.GetTags() {
			v.name("user tag", t, false)
		}
	case *proto.Command_UserDelete:
		v.name("user name", x.UserDelete.GetName(), true)
	case *proto.Command_PermissionSet:
		p := x.PermissionSet
		v.name("user name", p.GetUser(), true)
		v.name("vhost name", p.GetVhost(), true)
		v.text("configure pattern", p.GetConfigure(), MaxPatternLen)
		v.text("write pattern", p.GetWrite(), MaxPatternLen)
		v.text("read pattern", p.GetRead(), MaxPatternLen)
	case *proto.Command_PermissionClear:
		v.name("user name", x.PermissionClear.GetUser(), true)
		v.name("vhost name", x.PermissionClear.GetVhost(), true)
	case *proto.Command_ExchangeDeclare:
		d := x.ExchangeDeclare
		v.name("vhost name", d.GetVhost(), true)
		v.name("exchange name", d.GetName(), false)
		v.name("exchange type", d.GetType(), false)
		v.table("arguments", d.GetArguments(), 0)
	case *proto.Command_ExchangeDelete:
		v.name("vhost name", x.ExchangeDelete.GetVhost(), true)
		v.name("exchange name", x.ExchangeDelete.GetName(), false)
	case *proto.Command_QueueDeclare:
		d := x.QueueDeclare
		v.name("vhost name", d.GetVhost(), true)
		v.name("queue name", d.GetName(), false)
		v.table("arguments", d.GetArguments(), 0)
		v.connection("connection", d.GetConnection(), false)
	case *proto.Command_QueueDelete:
		d := x.QueueDelete
		v.name("vhost name", d.GetVhost(), true)
		v.name("queue name", d.GetName(), true)
		v.connection("connection", d.GetConnection(), false)
	case *proto.Command_QueuePurge:
		d := x.QueuePurge
		v.name("vhost name", d.GetVhost(), true)
		v.name("queue name", d.GetName(), true)
		v.connection("connection", d.GetConnection(), false)
	case *proto.Command_Bind:
		b := x.Bind
		v.binding(b.GetVhost(), b.GetSource(), b.GetDestination(), b.GetRoutingKey(), b.GetArguments(), b.GetConnection())
	case *proto.Command_Unbind:
		b := x.Unbind
		v.binding(b.GetVhost(), b.GetSource(), b.GetDestination(), b.GetRoutingKey(), b.GetArguments(), b.GetConnection())
	case *proto.Command_Publish:
		p := x.Publish
		v.publish(p.GetVhost(), p.GetExchange(), p.GetRoutingKey(), p.GetProperties(), len(p.GetBody()), p.GetChannel())
	case *proto.Command_Get:
		g := x.Get
		v.name("vhost name", g.GetVhost(), true)
		v.name("queue name", g.GetQueue(), true)
		v.channel("channel", g.GetChannel())
	case *proto.Command_Consume:
		cs := x.Consume
		v.name("vhost name", cs.GetVhost(), true)
		v.name("queue name", cs.GetQueue(), true)
		v.consumer("consumer", cs.GetConsumer())
		v.table("arguments", cs.GetArguments(), 0)
	case *proto.Command_Cancel:
		v.consumer("consumer", x.Cancel.GetConsumer())
	case *proto.Command_Credit:
		v.consumer("consumer", x.Credit.GetConsumer())
		if c := x.Credit.GetCredit(); c > MaxCredit {
			v.fail(replycode.PreconditionFailed, "credit %d is above %d", c, MaxCredit)
		}
		if p := x.Credit.GetPrefetch(); p > math.MaxUint16 {
			v.fail(replycode.PreconditionFailed, "prefetch %d is above %d", p, math.MaxUint16)
		}
	case *proto.Command_Settle:
		v.channel("channel", x.Settle.GetChannel())
		v.tags(len(x.Settle.GetTags()))
	case *proto.Command_Requeue:
		v.channel("channel", x.Requeue.GetChannel())
		v.tags(len(x.Requeue.GetTags()))
	case *proto.Command_Discard:
		v.channel("channel", x.Discard.GetChannel())
		v.tags(len(x.Discard.GetTags()))
	case *proto.Command_ChannelClosed:
		v.channel("channel", x.ChannelClosed.GetChannel())
		v.seen(x.ChannelClosed.GetSeen())
	case *proto.Command_ConnectionClosed:
		v.connection("connection", x.ConnectionClosed.GetConnection(), true)
		v.seen(x.ConnectionClosed.GetSeen())
	case *proto.Command_NodeDown:
		v.name("node", x.NodeDown.GetNode(), true)
		v.name("run", x.NodeDown.GetRun(), false)
	case *proto.Command_Expire:
		qs := x.Expire.GetQueues()
		v.list("queues", len(qs))
		for _, q := range qs {
			v.queueRef("queue", q)
			if v.err != nil {
				return
			}
		}
	case *proto.Command_ExpireQueue:
		v.queueRef("queue", x.ExpireQueue.GetQueue())
	case *proto.Command_Tick, *proto.Command_RestartLeases:
	case *proto.Command_PolicySet:
		p := x.PolicySet
		v.name("vhost name", p.GetVhost(), true)
		v.name("policy name", p.GetName(), true)
		v.text("policy pattern", p.GetPattern(), MaxPatternLen)
		v.name("policy apply-to", p.GetApplyTo(), false)
		if d := p.GetDefinition(); d != nil {
			if d.DeadLetterExchange != nil {
				v.name("dead-letter-exchange", d.GetDeadLetterExchange(), false)
			}
			if d.DeadLetterRoutingKey != nil {
				v.name("dead-letter-routing-key", d.GetDeadLetterRoutingKey(), false)
			}
			if d.Overflow != nil {
				v.name("overflow", d.GetOverflow(), false)
			}
		}
	case *proto.Command_VhostLimits:
		v.vhostLimits(x.VhostLimits)
	case *proto.Command_QueueGroups:
		v.queueGroups(x.QueueGroups)
	case *proto.Command_GroupMembers:
		v.groupMembers(x.GroupMembers)
	case *proto.Command_PlaceQueues:
	case *proto.Command_QueueLeaseEnded:
		// Named from a group's state, as ExpireQueue's queue is.
		e := x.QueueLeaseEnded
		v.queueRef("queue", &proto.QueueRef{Vhost: e.GetVhost(), Name: e.GetName()})
		v.name("queue group", e.GetGroup(), true)
	case *proto.Command_PolicyClear:
		v.name("vhost name", x.PolicyClear.GetVhost(), true)
		v.name("policy name", x.PolicyClear.GetName(), true)
	case *proto.Command_ConsumerTimeout:
		v.channel("channel", x.ConsumerTimeout.GetChannel())
		if d := x.ConsumerTimeout.GetDefaultMs(); d < 0 {
			v.fail(replycode.InternalError, "consumer timeout default %d is negative", d)
		}
	case *proto.Command_ReleaseDelayed:
		switch l := x.ReleaseDelayed.GetLimit(); {
		case l == 0:
			v.fail(replycode.InternalError, "release limit 0")
		case l > MaxReleaseBatch:
			v.fail(replycode.PreconditionFailed, "release limit %d is above %d", l, MaxReleaseBatch)
		}
	case *proto.Command_CancelDelayed:
		v.name("vhost name", x.CancelDelayed.GetVhost(), true)
		v.name("exchange name", x.CancelDelayed.GetExchange(), true)
		if x.CancelDelayed.GetSeq() == 0 {
			v.fail(replycode.InternalError, "delayed message 0")
		}
	case *proto.Command_PurgeDelayed:
		v.name("vhost name", x.PurgeDelayed.GetVhost(), true)
		v.name("exchange name", x.PurgeDelayed.GetExchange(), true)
	case *proto.Command_GroupInit:
		if x.GroupInit.GetGroup() == 0 {
			v.fail(replycode.InternalError, "group 0")
		}
	case *proto.Command_Enqueue:
		v.enqueue(x.Enqueue)
	case *proto.Command_HandOff:
		if x.HandOff.GetKey() == 0 {
			v.fail(replycode.InternalError, "hand-off key 0")
		}
		if x.HandOff.GetMessage() == nil {
			v.fail(replycode.InternalError, "hand-off without its message")
			return
		}
		v.enqueue(x.HandOff.GetMessage())
		v.list("routing keys", len(x.HandOff.GetRouteKeys()))
		for _, k := range x.HandOff.GetRouteKeys() {
			v.name("routing key", k, false)
		}
	case *proto.Command_HandOffDone:
		if x.HandOffDone.GetUpTo() == 0 {
			v.fail(replycode.InternalError, "hand-off done up to key 0")
		}
	case *proto.Command_SetProtocol:
		switch l := x.SetProtocol.GetLevel(); {
		case l == 0:
			v.fail(replycode.InternalError, "protocol level 0")
		case l > Protocol:
			v.fail(replycode.NotImplemented, "protocol level %d is above %d, the highest this node applies", l, Protocol)
		}
	default:
		// Validate returned before for a command of no kind; a kind added
		// to the oneof must be given its checks here.
		v.fail(replycode.InternalError, "command of kind %s has no validation", kindName(c))
	}
}

func (v *validator) publish(vhost, exchange, key string, props *proto.Properties, size int, ch *proto.ChannelRef) {
	v.name("vhost name", vhost, true)
	v.name("exchange name", exchange, false)
	v.name("routing key", key, false)
	v.properties(props)
	if size > v.maxBody {
		v.fail(replycode.PreconditionFailed, "message size %d is larger than configured max size %d", size, v.maxBody)
	}
	if ch != nil {
		v.channel("publishing channel", ch)
	}
}

// enqueue checks a pre-routed message as a publish is checked, and the
// queues it names.
func (v *validator) enqueue(p *proto.Enqueue) {
	v.publish(p.GetVhost(), p.GetExchange(), p.GetRoutingKey(), p.GetProperties(), len(p.GetBody()), p.GetChannel())
	v.list("queues", len(p.GetQueues()))
	for _, q := range p.GetQueues() {
		v.name("queue name", q, true)
	}
}

func (v *validator) binding(vhost, source, dest, key string, args *proto.Table, conn *proto.ConnectionRef) {
	v.name("vhost name", vhost, true)
	v.name("source exchange", source, false)
	v.name("destination", dest, false)
	v.name("routing key", key, false)
	v.table("arguments", args, 0)
	v.connection("connection", conn, false)
}
