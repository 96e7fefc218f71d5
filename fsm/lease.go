package fsm

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

// Leases of placed queues (level 23, fsm/DESIGN.md "Leases of placed
// queues"): a queue's lease runs out where its uses are decided, in the
// log that holds its consumers. For a placed queue that is its group's
// log, but its record and bindings are the metadata log's, and the
// metadata's mirror declares in the group every queue it places there.
// So the group does not simply delete a queue whose lease ran out: it
// deletes it and keeps its name as ended, under the metadata record it
// was declared from (placedAt). An ended queue is gone for every use
// (consume, get, a passive declare: 404; what is enqueued to it is
// dropped), and it is not declared again from the same record. The
// group's leader then has the metadata log delete the record
// (QueueLeaseEnded), only if it is still that record: a queue deleted and
// declared again meanwhile is another queue. The mirror then deletes the
// name from the group, which forgets it.

// placedAtOf is what a new queue records of its placing: in the metadata
// log, the index of the entry that placed it in a queue group (unique per
// record: a queue deleted and declared again is placed by a later entry);
// in a queue group's log, the same number, from the declare the metadata's
// record made (groupDeclare). 0 below level 23, and for a queue of the
// metadata group.
func (s *state) placedAtOf(q *queueState, c *proto.QueueDeclare) uint64 {
	switch {
	case !s.atLeast(levelLeases):
		return 0
	case s.groups.id != 0:
		return c.GetPlacedAt()
	case q.group != "":
		return s.index
	}
	return 0
}

// endQueue ends q, a queue of a queue group whose lease ran out: deleted
// as an expired queue is (its messages dropped, not dead-lettered), its
// name kept as ended under the record it was declared from.
func (s *state) endQueue(q *queueState) {
	v := s.vhosts[q.vhost]
	s.deleteQueue(q, true)
	if v.ended == nil {
		v.ended = map[string]uint64{}
	}
	v.ended[q.name] = q.placedAt
}

// endedRecord reports whether name ended in v under a record that a
// declare from record at would be: the same one, or one placed below
// level 23 (0), which cannot be told from any other.
func endedRecord(v *vhost, name string, at uint64) bool {
	e, ok := v.ended[name]
	return ok && (e == 0 || e == at)
}

// redeclareEnded refuses a declare into a queue group's log of a queue
// that ended there under the same record: the queue is gone until the
// metadata deletes the record, and a declare under another record (the
// queue declared again since) takes the name back.
func (s *state) redeclareEnded(v *vhost, name string, c *proto.QueueDeclare) *proto.Result {
	if endedRecord(v, name, c.GetPlacedAt()) {
		return notFound("queue", name, v.name)
	}
	forgetEnded(v, name)
	return nil
}

// forgetEnded forgets that name ended in v: the metadata no longer
// places it here (the mirror's QueueDelete).
func forgetEnded(v *vhost, name string) bool {
	if _, ok := v.ended[name]; !ok {
		return false
	}
	delete(v.ended, name)
	return true
}

// applyQueueLeaseEnded deletes, in the metadata log, a placed queue whose
// lease ended in its group, if the metadata still places it there under
// the record the group ended.
func (s *state) applyQueueLeaseEnded(c *proto.QueueLeaseEnded) *proto.Result {
	if !s.atLeast(levelLeases) {
		return refused(replycode.NotImplemented, fmt.Sprintf("NOT_IMPLEMENTED - a queue group's lease needs protocol level %d; the log is at %d", levelLeases, s.level))
	}
	if s.groups.id != 0 {
		return refused(replycode.PreconditionFailed, fmt.Sprintf("PRECONDITION_FAILED - a queue's record is the metadata log's; this log is group %d's", s.groups.id))
	}
	v, ok := s.vhosts[c.GetVhost()]
	if !ok {
		return &proto.Result{}
	}
	q, ok := v.queues[c.GetName()]
	if !ok || q.group == "" || q.group != c.GetGroup() || c.GetPlacedAt() != 0 && c.GetPlacedAt() != q.placedAt {
		return &proto.Result{}
	}
	s.deleteQueue(q, true)
	return &proto.Result{Queue: q.name}
}

// EndedQueue is a queue whose lease ended in a queue group's log, which
// the metadata may still place there (QueueLeaseEnded): its name and the
// metadata record it was declared from (0: placed below level 23).
type EndedQueue struct {
	Vhost, Name string
	PlacedAt    uint64
}

// EndedQueues lists the queues that ended in this queue group's log and
// that it has not forgotten, by vhost and name.
func (m *Machine) EndedQueues() []EndedQueue {
	var out []EndedQueue
	for _, v := range m.vhosts {
		for name, at := range v.ended {
			out = append(out, EndedQueue{Vhost: v.name, Name: name, PlacedAt: at})
		}
	}
	slices.SortFunc(out, func(a, b EndedQueue) int {
		return cmp.Or(cmp.Compare(a.Vhost, b.Vhost), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// EndedUnder reports whether queue name of vhost ended in this queue
// group's log under the metadata record placed at (or under record 0,
// which matches any): the mirror must not declare it again.
func (m *Machine) EndedUnder(vhost, name string, at uint64) bool {
	v, ok := m.vhosts[vhost]
	return ok && endedRecord(v, name, at)
}

// EndedNames lists the queues of vhost that ended in this queue group's
// log and that it has not forgotten, in no order.
func (m *Machine) EndedNames(vhost string) []string {
	v, ok := m.vhosts[vhost]
	if !ok || len(v.ended) == 0 {
		return nil
	}
	out := make([]string, 0, len(v.ended))
	for name := range v.ended {
		out = append(out, name)
	}
	return out
}

// Ended reports whether queue name of vhost ended in this queue group's
// log and is not forgotten yet.
func (m *Machine) Ended(vhost, name string) bool {
	v, ok := m.vhosts[vhost]
	if !ok {
		return false
	}
	_, ok = v.ended[name]
	return ok
}

// PlacedAt is the metadata record of placed queue name of vhost: the
// group it is placed in and the index of the entry that placed it (0
// below level 23); ok is false for a queue the log does not hold.
func (m *Machine) PlacedAt(vhost, name string) (group string, at uint64, ok bool) {
	v, ok := m.vhosts[vhost]
	if !ok {
		return "", 0, false
	}
	q, ok := v.queues[name]
	if !ok {
		return "", 0, false
	}
	return q.group, q.placedAt, true
}
