package fsm

import (
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/ttl"
)

// applyExpire kills, in deadline order, every ready message of the named
// queues whose deadline is <= now.
func (s *state) applyExpire(c *proto.Expire) *proto.Result {
	for _, ref := range c.GetQueues() {
		v, ok := s.vhosts[ref.GetVhost()]
		if !ok {
			continue
		}
		q, ok := v.queues[ref.GetName()]
		if !ok {
			continue
		}
		due := q.q.PopExpired(s.clock)
		for i := range due {
			s.kill(q, &due[i], ttl.ReasonExpired)
		}
		s.markTimed(q)
	}
	return &proto.Result{}
}

// applyExpireQueue deletes a queue whose lease is due and that has no
// consumers; its messages are not dead-lettered. A queue group's log at
// level 23 ends it instead (lease.go): its record is the metadata's.
func (s *state) applyExpireQueue(c *proto.ExpireQueue) *proto.Result {
	v, ok := s.vhosts[c.GetQueue().GetVhost()]
	if !ok {
		return &proto.Result{}
	}
	q, ok := v.queues[c.GetQueue().GetName()]
	if !ok {
		return &proto.Result{}
	}
	if due, ok := q.leaseDue(); ok && due <= s.clock {
		if s.groups.id != 0 && s.atLeast(levelLeases) {
			s.endQueue(q)
			return &proto.Result{Queue: q.name}
		}
		s.deleteQueue(q, true)
		return &proto.Result{Queue: q.name}
	}
	return &proto.Result{}
}

// applyRestartLeases restarts every queue's lease at the entry's stamp: the
// cluster was down, and a lease only runs while it is up.
func (s *state) applyRestartLeases() *proto.Result {
	for _, v := range s.vhosts {
		for _, q := range v.queues {
			q.lastUsed = max(q.lastUsed, s.clock)
		}
	}
	return &proto.Result{}
}
