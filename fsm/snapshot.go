package fsm

import (
	"crypto/sha256"
	"io"
	"runtime"

	"github.com/raftmq/raftmq/queue"
	"github.com/raftmq/raftmq/ttl"
)

// Taking, writing, digesting and restoring snapshots; the encoding itself
// is codec.go's.

// snapshot captures the state for raft, which calls it with no apply
// running and writes what it returns on another goroutine while applies
// go on. What it encodes here is the metadata (users, vhosts, exchanges,
// queues' fields, consumers, channels with their unacked deliveries, the
// retried messages); the messages of queues and of delayed exchanges,
// which follow the backlog, are captured (queue.Capture: the lists of
// their record blocks, shared copy-on-write with the state) and encoded
// by WriteTo, into the same bytes. The apply goroutine so waits for the
// metadata, not for the backlog (BenchmarkSnapshotHold: 383 ms at
// 5,000,000 queued when the messages were encoded here).
func (s *state) snapshot() (io.WriterTo, error) {
	cp := s.meta.Capture()
	e := &enc{b: make([]byte, 0, 4096), capture: cp, collect: true}
	s.encodeTo(e)
	l := &lazySnapshot{parts: e.parts, names: e.names, format: e.version(), capture: cp}
	// A snapshot dropped unreleased (a test's) would keep the state
	// copying what it shares with it.
	runtime.AddCleanup(l, func(cp *queue.Capture) { cp.Release() }, cp)
	return l, nil
}

// part is a run of a snapshot: encoded bytes, a queue's ready messages or
// the delayed messages (with the vhost of each id they wait in).
type part struct {
	b      []byte
	q      *queue.QueueView
	held   *queue.HeldView
	vhosts []string
}

// lazySnapshot is a snapshot whose messages are encoded as it is written.
type lazySnapshot struct {
	parts []part
	// names are the named bodies of the parts encoded at once (unacked
	// and retried messages).
	names []queue.Body
	// format is the header's: the messages are encoded in it too.
	format  uint64
	capture *queue.Capture
}

// Release ends the capture: the state stops copying what it shares with
// the snapshot, which must not be written or listed after.
func (l *lazySnapshot) Release() {
	l.capture.Release()
	l.parts, l.names = nil, nil
}

func (l *lazySnapshot) WriteTo(w io.Writer) (int64, error) {
	var total int64
	write := func(b []byte) error {
		n, err := w.Write(b)
		total += int64(n)
		return err
	}
	buf := &enc{b: make([]byte, 0, 64<<10), format: l.format}
	var err error
	flush := func(force bool) {
		if err == nil && len(buf.b) > 0 && (force || len(buf.b) >= 64<<10) {
			err = write(buf.b)
			buf.b = buf.b[:0]
		}
	}
	var pace queue.Pace
	for _, p := range l.parts {
		l.each(p, func(m *queue.Message, vhost string) {
			if p.held != nil {
				buf.s(vhost)
			}
			encMessage(buf, m)
			flush(false)
			pace.Step()
		})
		flush(true)
		if err == nil && p.b != nil {
			err = write(p.b)
		}
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// each calls fn with each message p captured, in the order it is
// written: delivery order for a queue, heap order for the delayed ones,
// each of these with its due time as its deadline and its vhost.
func (l *lazySnapshot) each(p part, fn func(m *queue.Message, vhost string)) {
	switch {
	case p.q != nil:
		p.q.Each(func(m *queue.Message) { fn(m, "") })
	case p.held != nil:
		var m queue.Message
		for i := 0; i < p.held.Len(); i++ {
			due, at := p.held.At(i, &m)
			m.Deadline = due
			fn(&m, p.vhosts[at])
		}
	}
}

// BodyCount bounds how many times EachBody calls its function.
func (l *lazySnapshot) BodyCount() int {
	n := len(l.names)
	for _, p := range l.parts {
		switch {
		case p.q != nil:
			n += p.q.Len()
		case p.held != nil:
			n += p.held.Len()
		}
	}
	return n
}

// EachBody calls fn with each body the snapshot names, in no particular
// order and a body perhaps more than once (a message routed to several
// queues), with whether it waits in a delayed exchange; inline bodies are
// left out. The node keeps them readable while the snapshot may be
// restored or sent to a follower. A snapshot of millions of messages is
// listed on raft's snapshot goroutine beside the applies, so the walk
// yields the processor now and then (queue.Pace).
func (l *lazySnapshot) EachBody(fn func(b queue.Body, delayed bool)) {
	for _, b := range l.names {
		fn(b, false)
	}
	var pace queue.Pace
	for _, p := range l.parts {
		delayed := p.held != nil
		l.each(p, func(m *queue.Message, _ string) {
			if _, inline := m.Inline(); !inline {
				fn(m.Body, delayed)
			}
			pace.Step()
		})
	}
}

func (s *state) digest() [32]byte {
	e := &enc{b: make([]byte, 0, 4096), digest: true}
	s.encodeTo(e)
	return sha256.Sum256(e.b)
}

func (s *state) restore(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	return s.restoreBytes(b)
}

func (s *state) restoreBytes(b []byte) error {
	n, err := decodeState(b)
	if err != nil {
		return err
	}
	*s = *n
	s.settingsGen = settingsGens.Add(1)
	s.queueChanges.restart()
	if checkHook != nil {
		checkHook(s)
	}
	return nil
}

// encDelayed writes the delayed messages in heap order (queue.Held): the
// sequence counter, then each message with its vhost, its due time in
// the place of a message's deadline.
func encDelayed(e *enc, s *state) {
	ds := &s.delayed
	e.u(ds.seq)
	e.u(uint64(ds.held.Len()))
	if e.capture != nil {
		vhosts := make([]string, len(ds.at))
		for i, a := range ds.at {
			if a.v != nil {
				vhosts[i] = a.v.name
			}
		}
		e.later(part{held: ds.held.Capture(e.capture), vhosts: vhosts})
		return
	}
	var m queue.Message
	for i := 0; i < ds.held.Len(); i++ {
		due, at := ds.held.At(i, &m)
		v, _ := ds.where(at)
		e.s(v.name)
		m.Deadline = due
		e.message(&m)
	}
}

// decDelayed reads what encDelayed wrote into s, whose exchanges are read.
func decDelayed(d *dec, s *state) bool {
	s.delayed.seq = d.u()
	n := d.n()
	for ; n > 0 && d.err == nil; n-- {
		vh := d.s()
		m := decMessage(d)
		v, ok := s.vhosts[vh]
		if !ok {
			return false
		}
		x, ok := v.exchanges[m.Exchange]
		if !ok || x.via == "" {
			return false
		}
		m.Exchange = x.name
		due := m.Deadline
		m.Deadline = ttl.NoDeadline
		s.delayed.held.Append(m, due, s.delayed.enter(v, x))
	}
	return d.err == nil
}
