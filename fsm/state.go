package fsm

import (
	"regexp"
	"sort"
	"strconv"

	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
	"github.com/raftmq/raftmq/ttl"
)

// Stats are cumulative counters and current totals of the state machine.
type Stats struct {
	Published    uint64 // publish commands accepted
	Routed       uint64 // queue copies enqueued by publishes
	Delivered    uint64 // deliveries to consumers and basic.get results
	Acked        uint64 // settled (incl. no-ack deliveries)
	Requeued     uint64
	Expired      uint64 // copies that died of TTL
	DeadLettered uint64 // copies re-published through a dead-letter exchange
	Dropped      uint64 // queued copies dropped by max-length (dead-lettered where configured)
	Refused      uint64 // copies a reject-publish queue refused
	Rejected     uint64 // copies discarded by clients
	Purged       uint64 // copies removed by purge or queue deletion
	Queues       uint64
	Ready        uint64
	ReadyBytes   uint64
	Unacked      uint64
	Consumers    uint64
	Overdue      uint64 // queued messages whose deadline is <= the clock
	// LeaseDueQueues counts queues whose x-expires lease is due.
	LeaseDueQueues uint64
	// Delayed counts the messages waiting in x-delayed-message exchanges.
	Delayed uint64
	// Deaths counts messages that died, by reason (DeathReasons) and by
	// whether their queue had a dead-letter exchange ([1]) or not ([0]),
	// from protocol level 5 on.
	Deaths [4][2]uint64
}

// DeathReasons are the reasons Stats.Deaths counts, in its order.
var DeathReasons = [4]string{ttl.ReasonExpired, ttl.ReasonMaxLen, ttl.ReasonRejected, ReasonDeliveryLimit}

type state struct {
	clock int64
	index uint64
	// pos is the position of the command being applied in its entry:
	// with index, the name of a published body (queue.Body).
	pos         uint32
	initialized bool
	vhosts      map[string]*vhost
	users       map[string]*user
	perms       map[string]*proto.PermissionInfo // user \x00 vhost
	channels    map[string]*channel
	// meta holds, once, what the ready messages of every queue share
	// (queue.Table): not state, memory only.
	meta *queue.Table
	// level is the log's protocol level (SetProtocol): which definition
	// of the existing command kinds applies (atLeast). 1 for a log that
	// never raised it.
	level uint32
	// tagFloor is above every delivery tag of a channel that was removed
	// at level 2 or later: a channel created later numbers from there, so
	// the log never hands out a tag twice under one channel's name (a
	// live node declared down keeps its channels, and an ack of an old
	// tag must not settle a new delivery). Always 0 at level 1.
	tagFloor uint64
	stats    Stats
	mark     uint64 // routing generation, not part of the state
	sink     Sink

	// delayed holds the messages of x-delayed-message exchanges waiting
	// for their due time (apply_delayed.go).
	delayed delayedSet
	// retry holds the returned messages waiting out a delayed retry
	// (apply_retry.go).
	retry retrySet
	// queueGroups are the queue groups the log names (queue_groups.go).
	queueGroups []QueueGroup
	// draws counts the x-local-random choices of the command being
	// applied (draw). Not state.
	draws drawCount
	// releases counts what this replica released (not state: see
	// ReleaseStats).
	releases ReleaseStats
	// groups is the machine as one group of several: its id, outbox and
	// the hand-offs it applied (groups.go).
	groups groupState
	// placing is set by PlaceQueues (placement.go): new queues are
	// placed in queue groups. placed counts the queues placed in each
	// group, derived from the queues (not state).
	placing bool
	placed  map[string]int
	// settingsGen changes whenever what a queue group mirrors, other than
	// which queues there are, may have changed (placement.go,
	// SettingsGen); queueChanges logs the queues declared and deleted
	// (queuechanges.go). Neither is state.
	settingsGen  uint64
	queueChanges queueChangeLog
	// timed and leased are the queues the due scans ask (dueindex.go);
	// not state.
	timed, leased queueSet
	// keyBuf is where applyChannel builds a channel's key; not state.
	keyBuf []byte
}

type user struct {
	name string
	hash []byte
	alg  string
	tags []string
}

type vhost struct {
	name, desc string
	exchanges  map[string]*exchange
	queues     map[string]*queueState
	policies   map[string]*policy
	operator   map[string]*policy
	// limits are the vhost's limits by name (vhost_limits.go), nil
	// when it has none.
	limits map[string]int64
	// ended are, in a queue group's log, the queues whose lease ended
	// there and that the metadata may still place here, by name, with
	// the metadata record each was declared from (lease.go).
	ended map[string]uint64
}

type policy struct {
	def *proto.PolicySet
	re  *regexp.Regexp
}

type exchange struct {
	name, typ                   string
	durable, autoDelete, intern bool
	args                        *proto.Table
	bindings                    []*binding
	mark                        uint64
	// via is how an x-delayed-message exchange routes (its
	// x-delayed-type), "" for every other exchange; delayed counts the
	// messages it holds (apply_delayed.go). Both derive from the state.
	via     string
	delayed int
	// at is the exchange's id among the places of delayed messages
	// (delayedSet.at) while it holds some; not state.
	at uint32
	// ring is what a picking exchange (apply_pick.go) routes with,
	// derived from its bindings; nil once they change. Not state.
	ring *ring
}

type binding struct {
	dest       string
	toExchange bool
	key        string
	args       *proto.Table
}

// queueIdentity is what names a queue and the properties its declare
// fixed for its life, which a redeclare must match.
type queueIdentity struct {
	vhost, name                    string
	durable, exclusive, autoDelete bool
	owner                          string // connRefKey of an exclusive queue's connection; "" otherwise
}

// queueArgs are a queue's x-arguments as parsed and validated, derived
// from the arguments of its declare (queueState.args, which the snapshot
// carries, so a restore parses them again: parseQueueArgs,
// restoreQueueArgs); an unset one leaves the policies' value to apply.
// Set when the queue is declared or restored, never changed after;
// x-max-priority is not here but in q.
type queueArgs struct {
	messageTTL, expires, maxLen, maxBytes ttl.Opt
	dlx, dlrk                             *string
	overflow                              string
	deliveryLimit                         *int64    // x-delivery-limit (features.go)
	sac                                   bool      // x-single-active-consumer (features.go)
	retry                                 retryArgs // x-delayed-retry-* (apply_retry.go)
}

type queueState struct {
	queueIdentity
	args             *proto.Table
	parsed           queueArgs
	q                queue.Queue
	consumers        []*consumer
	rr               int
	hadConsumer      bool
	lastUsed         int64
	unacked          int
	deleted          bool
	mark             uint64
	policy, opPolicy *policy
	// features: declared at protocol level 3 or later, so the arguments
	// of features.go apply; a queue declared before keeps the behaviour it
	// had (a replica replaying its declare at the old level and one
	// restoring it from a snapshot must agree).
	features    bool
	prioritized int // consumers with a nonzero x-priority
	counts      queueCounts

	// retryLevel: declared at protocol level 8 or later, so returns are
	// counted as RabbitMQ 4.3 counts them and delayed retry applies
	// (apply_retry.go); retrying counts its messages waiting there.
	retryLevel bool
	retrying   int

	// group is the queue group the queue is placed in (placement.go),
	// "" for a queue the machine holds: a placed queue is a record here
	// (name, arguments, bindings) and holds no messages.
	group string
	// placedAt names the metadata record of a placed queue, in both
	// logs (lease.go, placedAtOf).
	placedAt uint64

	// lastKey is the routing key of the last message enqueued, which the
	// next one with an equal key shares instead of holding its own copy
	// (memory only, not state).
	lastKey string

	// inTimed and inLeased: q is in the state's timed and leased sets
	// (dueindex.go). Not state.
	inTimed, inLeased bool
}

type consumer struct {
	ref       *proto.ConsumerRef
	q         *queueState
	ch        *channel
	noAck     bool
	exclusive bool
	prefetch  uint32
	credit    uint32 // assignments allowed before acks; 0: prefetch
	unacked   uint32
	args      *proto.Table
	gone      bool
	priority  int64 // x-priority (features.go)
	// capped is set at each dispatch from level 7 on when the consumer's
	// lookahead is idle (lookahead.go): derived, not state.
	capped bool
}

type channel struct {
	key       string
	ref       *proto.ChannelRef
	nextTag   uint64
	unacked   []*unacked // ascending tags
	consumers []*consumer
	// settled is the log time of the channel's latest settlement (ack,
	// reject or requeue), from level 4 on: a node writes the deliveries it
	// held beyond a consumer's prefetch as acks free room, so such a
	// delivery's consumer timeout counts from then (consumer_timeout.go).
	settled int64
}

// unacked is a delivery the channel's client has not settled yet.
type unacked struct {
	tag uint64
	q   *queueState
	m   *queue.Message
	c   *consumer
	// at is the log time of the assignment, from level 4 on (0 before):
	// the consumer timeout counts from it. held marks an assignment beyond
	// the consumer's prefetch, which its node held before writing it.
	at   int64
	held bool
}

func (s *state) init() {
	s.level = levelFirst
	s.vhosts = map[string]*vhost{}
	s.users = map[string]*user{}
	s.perms = map[string]*proto.PermissionInfo{}
	s.channels = map[string]*channel{}
	s.meta = &queue.Table{}
	s.delayed.held.SetTable(s.meta)
	s.settingsGen = settingsGens.Add(1)
	s.queueChanges.restart()
}

// atLeast reports whether the log's protocol level is at least l. A
// change to what an existing command kind does applies only from the
// level that introduced it: a replica replaying an old log, or restored
// from a snapshot older than the log's tail, must apply each entry as the
// replicas that first applied it did, and an entry written before the
// cluster raised its level was applied by binaries that knew only the
// old behaviour.
func (s *state) atLeast(l uint32) bool { return s.level >= l }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func chanKey(c *proto.ChannelRef) string {
	return string(appendChanKey(make([]byte, 0, len(c.GetNode())+len(c.GetConnection())+13), c))
}

// appendChanKey appends c's key to b: node, connection and the channel
// number raised by 1e10, so that keys sort by the number within a
// connection.
func appendChanKey(b []byte, c *proto.ChannelRef) []byte {
	b = append(b, c.GetNode()...)
	b = append(b, 0)
	b = append(b, c.GetConnection()...)
	b = append(b, 0)
	return strconv.AppendUint(b, uint64(c.GetChannel())+1e10, 10)
}

// applyChannel looks the channel ref names up without making its key,
// which an ack did for every delivery it settled. Apply only: it builds
// the key in the state's one buffer.
func (s *state) applyChannel(ref *proto.ChannelRef) (*channel, bool) {
	s.keyBuf = appendChanKey(s.keyBuf[:0], ref)
	ch, ok := s.channels[string(s.keyBuf)]
	return ch, ok
}

func connKey(node, conn string) string { return node + "\x00" + conn + "\x00" }

func rs(kind, name, vh string) string { return kind + " '" + name + "' in vhost '" + vh + "'" }

func refused(code uint32, text string) *proto.Result { return &proto.Result{Code: code, Text: text} }

func notFound(kind, name, vh string) *proto.Result {
	return refused(replycode.NotFound, "NOT_FOUND - no "+kind+" '"+name+"' in vhost '"+vh+"'")
}

func locked(name, vh string) *proto.Result {
	return refused(replycode.ResourceLocked, "RESOURCE_LOCKED - cannot obtain exclusive access to locked "+rs("queue", name, vh)+". It could be originally declared on another connection or the exclusive property value does not match that of the original declaration.")
}

// queueTTL is the effective queue message TTL (argument, policy, operator).
func (q *queueState) queueTTL() ttl.Opt {
	return ttl.Effective(q.parsed.messageTTL, polOpt(q.policy, func(d *proto.PolicyDefinition) *int64 { return d.MessageTtl }),
		polOpt(q.opPolicy, func(d *proto.PolicyDefinition) *int64 { return d.MessageTtl }))
}

func (q *queueState) expires() ttl.Opt {
	return ttl.Effective(q.parsed.expires, polOpt(q.policy, func(d *proto.PolicyDefinition) *int64 { return d.Expires }),
		polOpt(q.opPolicy, func(d *proto.PolicyDefinition) *int64 { return d.Expires }))
}

func (q *queueState) maxLen() ttl.Opt {
	return ttl.Effective(q.parsed.maxLen, polOpt(q.policy, func(d *proto.PolicyDefinition) *int64 { return d.MaxLength }),
		polOpt(q.opPolicy, func(d *proto.PolicyDefinition) *int64 { return d.MaxLength }))
}

func (q *queueState) maxBytes() ttl.Opt {
	return ttl.Effective(q.parsed.maxBytes, polOpt(q.policy, func(d *proto.PolicyDefinition) *int64 { return d.MaxLengthBytes }),
		polOpt(q.opPolicy, func(d *proto.PolicyDefinition) *int64 { return d.MaxLengthBytes }))
}

func polOpt(p *policy, f func(*proto.PolicyDefinition) *int64) ttl.Opt {
	if p == nil || p.def.GetDefinition() == nil {
		return ttl.Opt{}
	}
	if v := f(p.def.GetDefinition()); v != nil {
		return ttl.Some(*v)
	}
	return ttl.Opt{}
}

func (q *queueState) dlx() (string, bool) {
	if q.parsed.dlx != nil {
		return *q.parsed.dlx, true
	}
	if q.policy != nil && q.policy.def.GetDefinition().DeadLetterExchange != nil {
		return q.policy.def.GetDefinition().GetDeadLetterExchange(), true
	}
	return "", false
}

func (q *queueState) dlrk() (string, bool) {
	if q.parsed.dlrk != nil {
		return *q.parsed.dlrk, true
	}
	if q.policy != nil && q.policy.def.GetDefinition().DeadLetterRoutingKey != nil {
		return q.policy.def.GetDefinition().GetDeadLetterRoutingKey(), true
	}
	return "", false
}

func (q *queueState) overflow() string {
	if q.parsed.overflow != "" {
		return q.parsed.overflow
	}
	if q.policy != nil && q.policy.def.GetDefinition().Overflow != nil {
		return q.policy.def.GetDefinition().GetOverflow()
	}
	return "drop-head"
}

// leaseDue is when q's lease (its own x-expires or its policy's
// expires, the lower) runs out, if it has one running.
func (q *queueState) leaseDue() (int64, bool) {
	// A placed queue's lease is not run in the metadata, which does not
	// see its consumers, but in its group (leaseToPropose). Checked
	// before expires, which looks up policies: the due loop asks every
	// queue after every apply.
	if len(q.consumers) > 0 || q.group != "" {
		return 0, false
	}
	e := q.expires()
	if !e.Set {
		return 0, false
	}
	return ttl.LeaseDue(q.lastUsed, e.V), true
}

// valueAny converts an AMQP field value to the Go value the ttl rules take.
func valueAny(v *proto.Value) any {
	switch k := v.GetKind().(type) {
	case *proto.Value_Bool:
		return k.Bool
	case *proto.Value_Int8:
		return int64(k.Int8)
	case *proto.Value_Uint8:
		return int64(k.Uint8)
	case *proto.Value_Int16:
		return int64(k.Int16)
	case *proto.Value_Uint16:
		return int64(k.Uint16)
	case *proto.Value_Int32:
		return int64(k.Int32)
	case *proto.Value_Uint32:
		return int64(k.Uint32)
	case *proto.Value_Int64:
		return k.Int64
	case *proto.Value_Float32:
		return float64(k.Float32)
	case *proto.Value_Float64:
		return k.Float64
	case *proto.Value_Decimal:
		return ttl.Unsupported("decimal")
	case *proto.Value_LongString:
		return string(k.LongString)
	case *proto.Value_ShortString:
		return k.ShortString
	case *proto.Value_ByteArray:
		return k.ByteArray
	case *proto.Value_Timestamp:
		return ttl.Unsupported("timestamp")
	case *proto.Value_Table:
		return ttl.Unsupported("table")
	case *proto.Value_Array:
		return ttl.Unsupported("array")
	default:
		return nil
	}
}

func longstr(s string) *proto.Value {
	return &proto.Value{Kind: &proto.Value_LongString{LongString: []byte(s)}}
}
