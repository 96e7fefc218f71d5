package fsm

import (
	"sort"
	"strconv"

	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

func (s *state) applyConsume(c *proto.Consume) *proto.Result {
	ref := c.GetConsumer().GetChannel()
	q, r := s.lookupQueue(c.GetVhost(), c.GetQueue(), &proto.ConnectionRef{Node: ref.GetNode(), Connection: ref.GetConnection()})
	if r != nil {
		return r
	}
	if r := elsewhere(q); r != nil {
		return r
	}
	if q.features {
		if r := checkConsumeArgs(c.GetArguments()); r != nil {
			return r
		}
	}
	prio, r := consumerPriority(q, c.GetArguments())
	if r != nil {
		return r
	}
	ch := s.channel(ref)
	tag := c.GetConsumer().GetTag()
	if tag == "" {
		tag = "amq.ctag-" + strconv.FormatUint(s.index, 36) + "-" + strconv.FormatUint(ch.nextTag, 36) + "-" + strconv.Itoa(len(ch.consumers))
	}
	for _, x := range ch.consumers {
		if x.ref.GetTag() == tag {
			return refused(replycode.NotAllowed, "NOT_ALLOWED - attempt to reuse consumer tag '"+tag+"'")
		}
	}
	for _, x := range q.consumers {
		if x.exclusive || (c.GetExclusive() && len(q.consumers) > 0) {
			return refused(replycode.AccessRefused, "ACCESS_REFUSED - "+rs("queue", q.name, q.vhost)+" in exclusive use")
		}
	}
	cs := &consumer{ref: &proto.ConsumerRef{Channel: ch.ref, Tag: tag}, q: q, ch: ch, noAck: c.GetNoAck(),
		exclusive: c.GetExclusive(), prefetch: c.GetPrefetch(), credit: c.GetCredit(), args: c.GetArguments()}
	q.addConsumer(cs, prio)
	ch.consumers = append(ch.consumers, cs)
	q.hadConsumer = true
	q.lastUsed = s.clock
	s.dispatch(q, nil)
	return &proto.Result{ConsumerTag: tag}
}

func (s *state) applyCancel(c *proto.Cancel) *proto.Result {
	ch, ok := s.channels[chanKey(c.GetConsumer().GetChannel())]
	if !ok {
		return &proto.Result{ConsumerTag: c.GetConsumer().GetTag()}
	}
	for _, x := range ch.consumers {
		if x.ref.GetTag() == c.GetConsumer().GetTag() {
			s.removeConsumer(x)
			if !x.mayHold() {
				s.activateNext(x.q)
			}
			break
		}
	}
	return &proto.Result{ConsumerTag: c.GetConsumer().GetTag()}
}

// removeConsumer detaches a consumer; its unacked deliveries stay on the
// channel. An auto-delete queue goes with its last consumer.
func (s *state) removeConsumer(c *consumer) {
	q := c.q
	c.gone = true
	c.ch.consumers = deleteFunc(c.ch.consumers, func(x *consumer) bool { return x == c })
	q.consumers = deleteFunc(q.consumers, func(x *consumer) bool { return x == c })
	if c.priority != 0 {
		q.prioritized--
	}
	if q.rr >= len(q.consumers) {
		q.rr = 0
	}
	q.lastUsed = s.clock
	if q.autoDelete && q.hadConsumer && len(q.consumers) == 0 && !q.deleted {
		s.deleteQueue(q, true)
	}
}

func (s *state) applyChannelClosed(c *proto.ChannelClosed) *proto.Result {
	if ch, ok := s.channels[chanKey(c.GetChannel())]; ok {
		s.closeChannelAs(ch, false, returnFailed, s.seenAtClose(c.GetSeenListed(), c.GetSeen(), ch))
	}
	return &proto.Result{}
}

// seenAtClose is which of channel ch's deliveries in this log its
// client was sent, as the closing node named them (listed, from level
// 22): the others it held back (look-ahead beyond the prefetch) or had
// not received yet, and they go back as RabbitMQ returns what it never
// sent, unflagged and uncounted; a delivery-limit must not dead-letter
// a message no consumer saw. nil when the node named none: every one
// counts as seen, as before.
func (s *state) seenAtClose(listed bool, seen []*proto.SeenDeliveries, ch *channel) func(tag uint64) bool {
	if !listed || !s.atLeast(levelSeenAtClose) {
		return nil
	}
	var ranges [][]uint64
	for _, e := range seen {
		if e.GetChannel() == ch.ref.GetChannel() && e.GetGroup() == s.groups.id {
			ranges = append(ranges, e.GetRanges())
		}
	}
	return func(tag uint64) bool {
		for _, r := range ranges {
			// The first pair whose last tag is at or above tag.
			i := sort.Search(len(r)/2, func(i int) bool { return r[2*i+1] >= tag })
			if i < len(r)/2 && r[2*i] <= tag {
				return true
			}
		}
		return false
	}
}

func (s *state) closeChannel(ch *channel, notify bool, kind returnKind) {
	s.closeChannelAs(ch, notify, kind, nil)
}

// closeChannelAs closes ch: its consumers go, and its deliveries go back
// as kind says, but those seen reports unseen go back unseen (nil: all
// as kind says).
func (s *state) closeChannelAs(ch *channel, notify bool, kind returnKind, seen func(tag uint64) bool) {
	var qs []*queueState
	for len(ch.consumers) > 0 {
		c := ch.consumers[0]
		if notify {
			s.sink.ConsumerCancelled(c.ref)
		}
		s.removeConsumer(c)
		qs = append(qs, c.q)
	}
	s.requeueAs(ch.unacked, kind, seen)
	ch.unacked = nil
	if s.atLeast(levelTagFloor) {
		s.tagFloor = max(s.tagFloor, ch.nextTag)
	}
	delete(s.channels, ch.key)
	// After the requeue, so that a single active consumer taking over
	// gets the returned messages first, in their order.
	for _, q := range qs {
		s.activateNext(q)
	}
}

func (s *state) applyConnectionClosed(c *proto.ConnectionClosed) *proto.Result {
	s.closeConnectionsAs(connRefKey(c.GetConnection()), false, returnFailed, func(ch *channel) func(uint64) bool {
		return s.seenAtClose(c.GetSeenListed(), c.GetSeen(), ch)
	})
	return &proto.Result{}
}

func (s *state) applyNodeDown(c *proto.NodeDown) *proto.Result {
	s.closeConnections(c.GetNode()+"\x00", true, returnSeen)
	if rs, ok := s.sink.(ReleaseSink); ok && c.GetRun() != "" {
		rs.NodeReleased(c.GetNode(), c.GetRun())
		return &proto.Result{}
	}
	s.sink.NodeDown(c.GetNode())
	return &proto.Result{}
}

// closeConnections closes every channel whose key starts with prefix and
// deletes the exclusive queues such connections own.
func (s *state) closeConnections(prefix string, notify bool, kind returnKind) {
	s.closeConnectionsAs(prefix, notify, kind, nil)
}

// closeConnectionsAs is closeConnections with what each channel's client
// saw (closeChannelAs); nil: every delivery as kind says.
func (s *state) closeConnectionsAs(prefix string, notify bool, kind returnKind, seen func(*channel) func(uint64) bool) {
	for _, k := range sortedKeys(s.channels) {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
			if ch, ok := s.channels[k]; ok {
				var seenTag func(uint64) bool
				if seen != nil {
					seenTag = seen(ch)
				}
				s.closeChannelAs(ch, notify, kind, seenTag)
			}
		}
	}
	for _, vk := range sortedKeys(s.vhosts) {
		v := s.vhosts[vk]
		for _, qk := range sortedKeys(v.queues) {
			q, ok := v.queues[qk]
			if ok && q.exclusive && len(q.owner) >= len(prefix) && q.owner[:len(prefix)] == prefix {
				s.deleteQueue(q, notify)
			}
		}
	}
}
