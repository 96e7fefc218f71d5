package fsm

import (
	"cmp"
	"slices"

	"github.com/raftmq/raftmq/proto"
)

// The due loops of a log's leader ask, after every entry it applies, when
// the next message dies and the next lease runs out (nextDeadline,
// nextLeaseDue), and the leader lists what is due when it is
// (dueExpiries, dueLeases). Walking every queue for it took 12 % of the
// metadata leader's CPU at 8,000 queues, though few queues hold a
// message with a deadline and fewer have a lease. So the state keeps
// both sets: not state, derived where a queue's deadlines or its lease
// can change (a message enqueued or returned, a policy matched, a
// restore, which goes through the same paths), and pruned where
// deadlines leave. A queue in a set may have nothing due (the sets may
// hold more than they must, never less), so each is still asked.

// queueSet is a set of queues, iterated in no particular order: what is
// read from it is a minimum or is sorted.
type queueSet map[*queueState]struct{}

// markTimed brings q's membership of the timed set (queues whose ready
// messages have deadlines) in line with its messages.
func (s *state) markTimed(q *queueState) {
	_, has := q.q.EarliestDeadline()
	s.timed.set(q, &q.inTimed, has && !q.deleted)
}

// markLeased brings q's membership of the leased set (queues with an
// x-expires, as an argument or from a policy) in line with its settings.
func (s *state) markLeased(q *queueState) {
	s.leased.set(q, &q.inLeased, q.expires().Set && !q.deleted)
}

// set makes q a member of *qs or not, as in says; member is q's flag of
// membership, which saves a lookup on every enqueue.
func (qs *queueSet) set(q *queueState, member *bool, in bool) {
	switch {
	case in && !*member:
		if *qs == nil {
			*qs = queueSet{}
		}
		(*qs)[q] = struct{}{}
		*member = true
	case !in && *member:
		delete(*qs, q)
		*member = false
	}
}

func (s *state) nextDeadline() (int64, bool) {
	best, ok := int64(0), false
	for q := range s.timed {
		if d, has := q.q.EarliestDeadline(); has && (!ok || d < best) {
			best, ok = d, true
		}
	}
	return best, ok
}

// dueExpiries lists the queues holding a message due at now, by vhost
// and name.
func (s *state) dueExpiries(now int64) []*proto.QueueRef {
	var due []*queueState
	for q := range s.timed {
		if d, has := q.q.EarliestDeadline(); has && d <= now {
			due = append(due, q)
		}
	}
	return queueRefs(due)
}

// leaseToPropose is when the leader proposes q's ExpireQueue. A queue
// group's log below level 23 proposes none: a delete in the group alone
// would leave the queue in the metadata, whose mirror declares it again,
// empty, to lose what it takes at each lease's end. (A log at 24 places
// queues with their own x-expires, and a queue group's log may still be
// below 23 until its leader raises it to the metadata's level.) From
// level 23 on the group ends the queue and the metadata deletes its
// record after it (lease.go). Apply is the same in every state at a
// level, so an ExpireQueue a leader of an earlier release proposed
// applies alike on every replica.
func (s *state) leaseToPropose(q *queueState) (int64, bool) {
	if s.groups.id != 0 && !s.atLeast(levelLeases) {
		return 0, false
	}
	return q.leaseDue()
}

func (s *state) nextLeaseDue() (int64, bool) {
	best, ok := int64(0), false
	for q := range s.leased {
		if d, has := s.leaseToPropose(q); has && (!ok || d < best) {
			best, ok = d, true
		}
	}
	return best, ok
}

// dueLeases lists the queues whose lease is due at now, by vhost and
// name.
func (s *state) dueLeases(now int64) []*proto.QueueRef {
	var due []*queueState
	for q := range s.leased {
		if d, has := s.leaseToPropose(q); has && d <= now {
			due = append(due, q)
		}
	}
	return queueRefs(due)
}

// queueRefs names qs sorted by vhost, then name.
func queueRefs(qs []*queueState) []*proto.QueueRef {
	if len(qs) == 0 {
		return nil
	}
	slices.SortFunc(qs, func(a, b *queueState) int {
		return cmp.Or(cmp.Compare(a.vhost, b.vhost), cmp.Compare(a.name, b.name))
	})
	out := make([]*proto.QueueRef, len(qs))
	for i, q := range qs {
		out[i] = &proto.QueueRef{Vhost: q.vhost, Name: q.name}
	}
	return out
}
