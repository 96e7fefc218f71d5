package fsm

import (
	"cmp"
	"slices"
	"sort"
	"strconv"

	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
	"github.com/raftmq/raftmq/ttl"
)

// take removes the deliveries named by (tag, multiple) from the channel; all
// takes every one. tags, when given, names the deliveries exactly instead:
// all of them are taken, or none if one is unknown.
func (s *state) take(ref *proto.ChannelRef, tag uint64, multiple, all bool, tags []uint64) ([]*unacked, *channel, *proto.Result) {
	ps, ch, r := s.takeOut(ref, tag, multiple, all, tags)
	if len(ps) > 0 && s.atLeast(levelConsumerTimeout) {
		ch.settled = s.clock
	}
	return ps, ch, r
}

// takeOut is take without the settlement's time.
func (s *state) takeOut(ref *proto.ChannelRef, tag uint64, multiple, all bool, tags []uint64) ([]*unacked, *channel, *proto.Result) {
	ch, ok := s.applyChannel(ref)
	if len(tags) > 0 && !all {
		return s.takeTags(ch, ok, tags)
	}
	if all || (multiple && tag == 0) {
		if !ok {
			return nil, nil, nil
		}
		out := ch.unacked
		ch.unacked = nil
		return out, ch, nil
	}
	if !ok {
		return nil, nil, unknownTag(tag)
	}
	i := sort.Search(len(ch.unacked), func(i int) bool { return ch.unacked[i].tag >= tag })
	if i == len(ch.unacked) || ch.unacked[i].tag != tag {
		return nil, nil, unknownTag(tag)
	}
	var out []*unacked
	switch {
	case multiple:
		out = append(out, ch.unacked[:i+1]...)
		clear(ch.unacked[:i+1])
		ch.unacked = ch.unacked[i+1:]
	case i == 0:
		out = []*unacked{ch.unacked[0]}
		ch.unacked[0] = nil
		ch.unacked = dropFront(ch.unacked, 1)
	default:
		out = []*unacked{ch.unacked[i]}
		ch.unacked = append(ch.unacked[:i], ch.unacked[i+1:]...)
	}
	return out, ch, nil
}

func (s *state) takeTags(ch *channel, ok bool, tags []uint64) ([]*unacked, *channel, *proto.Result) {
	want := slices.Clone(tags)
	slices.Sort(want)
	want = slices.Compact(want)
	idx := make([]int, len(want))
	for k, t := range want {
		found := false
		if ok {
			idx[k], found = slices.BinarySearchFunc(ch.unacked, t, func(p *unacked, t uint64) int { return cmp.Compare(p.tag, t) })
		}
		if !found {
			return nil, nil, unknownTag(t)
		}
	}
	out := make([]*unacked, len(idx))
	for k, i := range idx {
		out[k] = ch.unacked[i]
	}
	if idx[len(idx)-1] == len(idx)-1 {
		// The oldest deliveries, as a consumer acking in order settles
		// them: drop the front instead of moving the rest.
		clear(ch.unacked[:len(idx)])
		ch.unacked = dropFront(ch.unacked, len(idx))
		return out, ch, nil
	}
	w, next := idx[0], 0
	for i := idx[0]; i < len(ch.unacked); i++ {
		if next < len(idx) && idx[next] == i {
			next++
			continue
		}
		ch.unacked[w] = ch.unacked[i]
		w++
	}
	clear(ch.unacked[w:])
	ch.unacked = ch.unacked[:w]
	return out, ch, nil
}

func unknownTag(tag uint64) *proto.Result {
	return refused(replycode.PreconditionFailed, "PRECONDITION_FAILED - unknown delivery tag "+strconv.FormatUint(tag, 10))
}

// dropFront is us without its first n, whose slots are cleared already.
// Emptied, it keeps a small array: a consumer that acks each delivery
// before the next holds one at a time, and slicing the front off left no
// room for the next, so each delivery made a new array. A large one
// (after a burst) goes.
func dropFront(us []*unacked, n int) []*unacked {
	if n < len(us) {
		return us[n:]
	}
	if cap(us) > keptUnackedCap {
		return nil
	}
	return us[:0]
}

// keptUnackedCap is the most room a channel's emptied list of
// deliveries keeps.
const keptUnackedCap = 64

// release drops the bookkeeping of a finished delivery and returns the
// queues whose consumers regained credit.
func release(ps []*unacked) []*queueState {
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
	ps, _, r := s.take(c.GetChannel(), c.GetDeliveryTag(), c.GetMultiple(), false, c.GetTags())
	if r != nil {
		return r
	}
	s.stats.Acked += uint64(len(ps))
	countAcks(ps)
	s.redispatch(release(ps))
	return &proto.Result{}
}

func (s *state) applyRequeue(c *proto.Requeue) *proto.Result {
	ps, _, r := s.take(c.GetChannel(), c.GetDeliveryTag(), c.GetMultiple(), c.GetAll(), c.GetTags())
	if r != nil {
		return r
	}
	s.requeue(ps, requeueKind(c))
	return &proto.Result{}
}

// requeue puts deliveries back at the head of their queues in tag order,
// with their original deadlines; overdue ones die at once. Returns the
// client saw (kind) are flagged redelivered and counted; unseen ones keep
// the flag they had.
func (s *state) requeue(ps []*unacked, kind returnKind) {
	s.requeueAs(ps, kind, nil)
}

// requeueAs is requeue, but a delivery seen reports unseen goes back
// unseen whatever kind says (nil: every one as kind says).
func (s *state) requeueAs(ps []*unacked, kind returnKind, seenTag func(tag uint64) bool) {
	type returning struct {
		m    *queue.Message
		seen bool
	}
	qs := release(ps)
	byQueue := map[*queueState][]returning{}
	var order []*queueState
	for _, p := range ps {
		if p.q.deleted {
			s.stats.Purged++
			continue
		}
		if _, ok := byQueue[p.q]; !ok {
			order = append(order, p.q)
		}
		seen := kind != returnUnseen && (seenTag == nil || seenTag(p.tag))
		if seen {
			p.m.Redelivered = true
		}
		byQueue[p.q] = append(byQueue[p.q], returning{p.m, seen})
	}
	for _, q := range order {
		var back []*queue.Message
		for _, r := range byQueue[q] {
			if ttl.Expired(r.m.Deadline, s.clock) {
				s.kill(q, r.m, ttl.ReasonExpired)
				continue
			}
			if r.seen && s.returned(q, r.m, kind == returnFailed) {
				continue
			}
			back = append(back, r.m)
		}
		s.stats.Requeued += uint64(len(back))
		q.q.PushFront(back)
		s.enforceLimits(q)
		s.markTimed(q)
	}
	s.redispatch(qs)
}

func (s *state) applyDiscard(c *proto.Discard) *proto.Result {
	ps, _, r := s.take(c.GetChannel(), c.GetDeliveryTag(), c.GetMultiple(), false, c.GetTags())
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
