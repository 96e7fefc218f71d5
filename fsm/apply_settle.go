package fsm

import (
	"sort"
	"strconv"

	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
	"github.com/raftmq/raftmq/ttl"
)

// take removes the deliveries named by (tag, multiple) from the channel; all
// takes every one.
func (s *state) take(ref *proto.ChannelRef, tag uint64, multiple, all bool) ([]*pending, *channel, *proto.Result) {
	ch, ok := s.channels[chanKey(ref)]
	if all || (multiple && tag == 0) {
		if !ok {
			return nil, nil, nil
		}
		out := ch.unacked
		ch.unacked = nil
		return out, ch, nil
	}
	unknown := refused(406, "PRECONDITION_FAILED - unknown delivery tag "+strconv.FormatUint(tag, 10))
	if !ok {
		return nil, nil, unknown
	}
	i := sort.Search(len(ch.unacked), func(i int) bool { return ch.unacked[i].tag >= tag })
	if i == len(ch.unacked) || ch.unacked[i].tag != tag {
		return nil, nil, unknown
	}
	var out []*pending
	switch {
	case multiple:
		out = append(out, ch.unacked[:i+1]...)
		clear(ch.unacked[:i+1])
		ch.unacked = ch.unacked[i+1:]
	case i == 0:
		out = []*pending{ch.unacked[0]}
		ch.unacked[0] = nil
		ch.unacked = ch.unacked[1:]
	default:
		out = []*pending{ch.unacked[i]}
		ch.unacked = append(ch.unacked[:i], ch.unacked[i+1:]...)
	}
	return out, ch, nil
}

// release drops the bookkeeping of a finished delivery and returns the
// queues whose consumers regained credit.
func release(ps []*pending) []*queueState {
	var qs []*queueState
	for _, p := range ps {
		if p.c != nil {
			p.c.unacked--
		}
		p.q.unacked--
		if len(qs) == 0 || qs[len(qs)-1] != p.q {
			qs = append(qs, p.q)
		}
	}
	return qs
}

func (s *state) redispatch(qs []*queueState) {
	seen := map[*queueState]bool{}
	for _, q := range qs {
		if !seen[q] && !q.deleted {
			seen[q] = true
			s.dispatch(q, nil)
		}
	}
}

func (s *state) applySettle(c *proto.Settle) *proto.Result {
	ps, _, r := s.take(c.GetChannel(), c.GetDeliveryTag(), c.GetMultiple(), false)
	if r != nil {
		return r
	}
	s.stats.Acked += uint64(len(ps))
	s.redispatch(release(ps))
	return &proto.Result{}
}

func (s *state) applyRequeue(c *proto.Requeue) *proto.Result {
	ps, ch, r := s.take(c.GetChannel(), c.GetDeliveryTag(), c.GetMultiple(), c.GetAll())
	if r != nil {
		return r
	}
	s.requeue(ch, ps)
	return &proto.Result{}
}

// requeue puts deliveries back at the head of their queues in tag order,
// redelivered, with their original deadlines; overdue ones die at once.
func (s *state) requeue(_ *channel, ps []*pending) {
	qs := release(ps)
	byQueue := map[*queueState][]*queue.Message{}
	var order []*queueState
	for _, p := range ps {
		if p.q.deleted {
			s.stats.Purged++
			continue
		}
		if _, ok := byQueue[p.q]; !ok {
			order = append(order, p.q)
		}
		p.m.Redelivered = true
		byQueue[p.q] = append(byQueue[p.q], p.m)
	}
	for _, q := range order {
		var back []*queue.Message
		for _, m := range byQueue[q] {
			if m.Deadline <= s.clock {
				s.kill(q, m, ttl.ReasonExpired)
				continue
			}
			back = append(back, m)
		}
		s.stats.Requeued += uint64(len(back))
		q.q.PushFront(back)
		s.enforceLimits(q)
	}
	s.redispatch(qs)
}

func (s *state) applyDiscard(c *proto.Discard) *proto.Result {
	ps, _, r := s.take(c.GetChannel(), c.GetDeliveryTag(), c.GetMultiple(), false)
	if r != nil {
		return r
	}
	qs := release(ps)
	for _, p := range ps {
		s.stats.Rejected++
		if !p.q.deleted {
			s.deadLetter(p.q, p.m, ttl.ReasonRejected)
		}
	}
	s.redispatch(qs)
	return &proto.Result{}
}
