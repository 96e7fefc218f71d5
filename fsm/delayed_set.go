package fsm

import (
	"github.com/raftmq/raftmq/queue"
)

// delayedSet is where the messages of delayed exchanges wait: the records
// are queue's (queue.Held: a min-heap on (due, seq) of pointer-free
// records whose shared parts are in the state's queue.Table), each naming
// the exchange it waits in by a small id (at). The heap's slice order is
// state (queue.Held); the ids are not and are never written.
type delayedSet struct {
	held queue.Held
	seq  uint64 // the last Seq given
	// at is where delayed messages wait: an exchange holding some has an
	// id (exchange.at) until its last leaves, so a record names it in
	// four bytes.
	at []delayedAt
	// freeAt are the ids of at no exchange holds.
	freeAt []uint32
}

type delayedAt struct {
	v *vhost
	x *exchange
}

// where is the vhost and exchange the record with id at waits in.
func (d *delayedSet) where(at uint32) (*vhost, *exchange) {
	a := &d.at[at]
	return a.v, a.x
}

// enter counts one more message held by x, giving x an id on its first.
func (d *delayedSet) enter(v *vhost, x *exchange) uint32 {
	if x.delayed == 0 {
		if n := len(d.freeAt); n > 0 {
			x.at = d.freeAt[n-1]
			d.freeAt = d.freeAt[:n-1]
			d.at[x.at] = delayedAt{v: v, x: x}
		} else {
			x.at = uint32(len(d.at))
			d.at = append(d.at, delayedAt{v: v, x: x})
		}
	}
	x.delayed++
	return x.at
}

// leave counts one message less held by the exchange with id at, freeing
// the id with its last.
func (d *delayedSet) leave(at uint32) {
	_, x := d.where(at)
	if x.delayed--; x.delayed > 0 {
		return
	}
	d.at[x.at] = delayedAt{}
	if len(d.freeAt)+1 == len(d.at) {
		d.at, d.freeAt = nil, nil
		return
	}
	d.freeAt = append(d.freeAt, x.at)
}

// hold adds a message to x's delayed messages, due after delay.
func (s *state) hold(v *vhost, x *exchange, delay int64, rk string, enc []byte, bcc []string, body queue.Body, inline []byte) {
	d := &s.delayed
	d.seq++
	m := queue.Message{Exchange: x.name, RoutingKey: rk, Props: enc, Body: body, Enqueued: s.clock, MsgTTL: -1, Seq: d.seq}
	m.SetBCC(bcc)
	if inline != nil {
		m.SetInline(inline)
	}
	d.held.Push(&m, s.clock+delay, d.enter(v, x))
}

// popDelayed takes the earliest delayed message out into m and returns
// its due time and where it waited.
func (s *state) popDelayed(m *queue.Message) (due int64, v *vhost, x *exchange) {
	due, at := s.delayed.held.Pop(m)
	v, x = s.delayed.where(at)
	s.delayed.leave(at)
	return due, v, x
}

// dropDelayedOf removes the delayed messages of a deleted vhost; a scan of
// every delayed message only when one of its exchanges holds some.
func (s *state) dropDelayedOf(v *vhost) {
	for _, x := range v.exchanges {
		if x.delayed > 0 {
			s.dropDelayed(func(dv *vhost, _ *exchange) bool { return dv == v })
			return
		}
	}
}

// dropDelayed removes the delayed messages waiting where del selects
// (their exchange or vhost was deleted): they would have routed nowhere.
func (s *state) dropDelayed(del func(*vhost, *exchange) bool) {
	d := &s.delayed
	d.held.Drop(func(at uint32) bool { return del(d.where(at)) }, d.leave)
}

// nextDelayed is the due time and sequence of the earliest delayed message.
func (s *state) nextDelayed() (due int64, seq uint64, ok bool) {
	if s.delayed.held.Len() == 0 {
		return 0, 0, false
	}
	due, seq, _ = s.delayed.held.Key(0)
	return due, seq, true
}
