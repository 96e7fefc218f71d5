package amqp

import (
	"cmp"
	"slices"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// Consumer look-ahead and delivery tags.
//
// The log assigns deliveries to a consumer while it has credit, and an ack
// returns credit only once it has committed and been applied here. With
// credit equal to the prefetch, a consumer on a busy cluster spends most of
// its time waiting for that round trip. So a consumer with a prefetch of
// at least minLookaheadPrefetch gets a credit of prefetch × (1 + the
// server's ConsumerLookahead): the log may assign that many, and this node
// writes at most prefetch of them to the client, holding the rest and
// writing one as each ack arrives, before the ack reaches the log.
//
// Held deliveries are written later than deliveries of the channel's other
// consumers that the log assigned after them, so the tags a client sees
// cannot be the log's: a multiple ack would cover tags it never saw. The
// channel numbers what it writes itself (1, 2, 3, ... in write order, as
// AMQP requires) and translates each acknowledgement into the log's tags,
// sent as an explicit list.
//
// A channel may consume from queues of several groups, each a log of its
// own that numbers the deliveries it assigns to the channel by itself, so
// two logs' tags collide. A delivery's log tag is therefore known with its
// group (logRef), and an acknowledgement becomes one command per group it
// touches, each naming that log's tags and going to that log. With every
// queue in group 0 (the metadata group) that is one command, as before.

// minLookaheadPrefetch is the least prefetch that gets look-ahead: a small
// prefetch (1 is the classic fair-dispatch setting) asks for messages to
// stay in the queue for whichever consumer is free first.
const minLookaheadPrefetch = 10

// maxLookahead bounds the deliveries one consumer's node holds.
const maxLookahead = 2000

// consumerCredit is the credit the log gives a consumer with this prefetch.
func consumerCredit(prefetch uint32, noAck bool, factor int) uint32 {
	if noAck || factor <= 0 || prefetch < minLookaheadPrefetch {
		return prefetch
	}
	extra := min(uint64(prefetch)*uint64(factor), maxLookahead)
	return prefetch + uint32(extra)
}

// logRef names a delivery in the log that assigned it: the group and
// that log's tag.
type logRef struct {
	group uint32
	tag   uint64
}

func refOf(d *fsm.Delivery) logRef { return logRef{d.Group, d.DeliveryTag} }

// sortRefs sorts refs by group, then tag.
func sortRefs(refs []logRef) {
	slices.SortFunc(refs, func(a, b logRef) int {
		if c := cmp.Compare(a.group, b.group); c != 0 {
			return c
		}
		return cmp.Compare(a.tag, b.tag)
	})
}

// groupTags are log tags of one group's log.
type groupTags struct {
	group uint32
	tags  []uint64
}

// byGroup splits refs, sorted by sortRefs, into the tags of each group,
// groups ascending.
func byGroup(refs []logRef) []groupTags {
	var out []groupTags
	for _, r := range refs {
		if n := len(out); n == 0 || out[n-1].group != r.group {
			out = append(out, groupTags{group: r.group})
		}
		out[len(out)-1].tags = append(out[len(out)-1].tags, r.tag)
	}
	return out
}

// groupCmd is a command naming deliveries of one group's log, for that log.
type groupCmd struct {
	group uint32
	cmd   *proto.Command
}

// written is a delivery the client holds: its tags and consumer.
type written struct {
	wire     uint64
	log      logRef
	consumer string
}

// window is the client-side limit of a consumer with look-ahead.
type window struct {
	prefetch uint32
	inflight uint32          // written and not yet acknowledged
	held     []*fsm.Delivery // assigned by the log, not yet written
	ctl      creditCtl       // the credit the log gives it (credit.go)
	// cancelling is set once the client asked to cancel the consumer:
	// nothing held is written any more (ledger.cancelling).
	cancelling bool
}

// full reports whether the client holds w's prefetch (0: no limit).
func (w *window) full() bool { return w.prefetch != 0 && w.inflight >= w.prefetch }

// translateAck turns a client's basic.ack, basic.nack or basic.reject into
// the log commands naming the logs' tags, one item per group whose
// deliveries it names (groups ascending; in a transaction each carries
// the deliveries of its group that commit takes); outside a transaction
// the client's credit comes back at once. It runs in the connection's
// reader, so it sees acknowledgements in the order the client sent them.
// There is no item when the method names no delivery.
func (ch *channel) translateAck(m wire.Method, tx bool, now int64) ([]item, *wire.Error) {
	ch.mu.Lock()
	tags, pending, a, e := ch.led.ack(m, tx, now)
	ch.carryOut(a)
	ch.mu.Unlock()
	if e != nil {
		return nil, e
	}
	// Only a multiple ack of tag 0 names nothing without an error: with
	// nothing outstanding it is a no-op in RabbitMQ, and a command naming
	// no delivery would read as tag 0 in the log.
	ref := ch.ref()
	var items []item
	for _, g := range byGroup(tags) {
		it := item{m: m, group: g.group, cmd: ackCommand(m, ref, g.tags)}
		for _, w := range pending {
			if w.log.group == g.group {
				it.pending = append(it.pending, w)
			}
		}
		items = append(items, it)
	}
	return items, nil
}

// ackCommand is the log command of an acknowledgement naming tags of one
// log.
func ackCommand(m wire.Method, ref *proto.ChannelRef, tags []uint64) *proto.Command {
	switch m := m.(type) {
	case *wire.BasicNack:
		return settleTags(ref, tags, m.Requeue, false)
	case *wire.BasicReject:
		// RabbitMQ 4.3 counts a reject as a failed delivery attempt and
		// a nack as a return only (fsm/apply_retry.go).
		return settleTags(ref, tags, m.Requeue, true)
	}
	return &proto.Command{Cmd: &proto.Command_Settle{Settle: &proto.Settle{Channel: ref, Tags: tags}}}
}

// unseenRequeues are the commands that hand deliveries the client never
// saw back to their queues, one per group.
func unseenRequeues(ref *proto.ChannelRef, refs []logRef) []groupCmd {
	var out []groupCmd
	for _, g := range byGroup(refs) {
		cmd := settleTags(ref, g.tags, true, false)
		cmd.GetRequeue().Unseen = true
		out = append(out, groupCmd{group: g.group, cmd: cmd})
	}
	return out
}

func settleTags(ref *proto.ChannelRef, tags []uint64, requeue, failed bool) *proto.Command {
	if requeue {
		return &proto.Command{Cmd: &proto.Command_Requeue{Requeue: &proto.Requeue{Channel: ref, Tags: tags, Failed: failed}}}
	}
	return &proto.Command{Cmd: &proto.Command_Discard{Discard: &proto.Discard{Channel: ref, Tags: tags}}}
}

// committedAcks settles, after tx.commit, the acknowledgements the
// transaction carried: they leave what the client holds and return credit.
func (ch *channel) committedAcks(items []item, now int64) {
	var pending []written
	for _, it := range items {
		pending = append(pending, it.pending...)
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.carryOut(ch.led.commit(pending, now))
}

// recoverTags takes everything the channel was assigned and has not
// settled, written or held, for basic.recover to requeue by name: a
// delivery assigned after this point is a new one and stays. Locks: none.
func (ch *channel) recoverTags() []logRef {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.led.recover()
}

// heldRequeue closes the channel's ledger and returns the unseen requeues
// of what it held and never wrote (one per group, none when nothing was
// held), and before them the cancels of the channel's consumers. A closing channel sends them before
// its ChannelClosed, which would requeue the held deliveries flagged
// redelivered. The cancels come first because the requeue returns the
// consumers' credit: while they are registered, the log hands the
// messages straight back to them, and the ChannelClosed that follows
// requeues them as seen. Locks: none.
func (ch *channel) heldRequeue() (cancels []*proto.Command, requeues []groupCmd) {
	ch.mu.Lock()
	out := ch.led.close()
	ch.sent = out.redelivered
	ch.mu.Unlock()
	if len(out.unseen) == 0 {
		return nil, nil
	}
	ref := ch.ref()
	for _, tag := range out.cancels {
		cancels = append(cancels, &proto.Command{Cmd: &proto.Command_Cancel{Cancel: &proto.Cancel{
			Consumer: &proto.ConsumerRef{Channel: ref, Tag: tag},
		}}})
	}
	return cancels, unseenRequeues(ref, out.unseen)
}

// takeHeld empties w's held deliveries, appending their log tags to tags.
func (w *window) takeHeld(tags []logRef) []logRef {
	for _, d := range w.held {
		tags = append(tags, refOf(d))
	}
	w.held = nil
	return tags
}
