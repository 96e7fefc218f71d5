package fsm

import (
	"cmp"
	"crypto/sha256"
	"io"
	"slices"

	"github.com/raftmq/raftmq/internal/offheap"
	"github.com/raftmq/raftmq/queue"
	"github.com/raftmq/raftmq/ttl"
)

// Taking, writing, digesting and restoring snapshots; the encoding itself
// is codec.go's.

// snapshot encodes the state under the caller's lock. Messages hold no
// bodies, so this costs about 30 bytes a queued message (44 ms for a
// million, BenchmarkSnapshot): less than copying their structs for a later
// encoding (121 ms for a million, which the lazy form below took), and the
// lock is held once. The lazy form remains for states holding bodies
// inline (restored from a format before 7), where encoding under the lock
// stalled applies for seconds (2.1 s for 400 MB).
func (s *state) snapshot() (io.WriterTo, error) {
	if s.inline {
		e := &enc{b: make([]byte, 0, 4096), lazy: true}
		s.encodeTo(e)
		return &lazySnapshot{parts: e.parts, format: e.version()}, nil
	}
	n := 0
	for _, v := range s.vhosts {
		for _, q := range v.queues {
			n += q.q.Len()
		}
	}
	for _, ch := range s.channels {
		n += len(ch.unacked)
	}
	n += s.delayed.held.Len() + len(s.retry.h)
	// Sized once, not grown by doubling: a regrowth copies the whole
	// encoding so far, under the lock (200 MB at 5,000,000 queued), and
	// holds both copies. The last snapshot's bytes a message, with a
	// sixteenth to spare, guess the size; 40 until there is one.
	per := s.snapPerMsg
	if per == 0 {
		per = 40
	}
	//
	// A large one is outside the heap (offheap): on it, the encoding of
	// a backlog raised the collector's goal by its size while raft wrote
	// it, and its pages stayed resident long after (191 MB at 5,000,000
	// queued). Release gives them back.
	buf := offheap.Alloc(64<<10 + per*n + per*n/16)
	e := &enc{b: buf.Bytes(), collect: true, names: make([]queue.Body, 0, n)}
	s.encodeTo(e)
	if n > 0 {
		s.snapPerMsg = max(len(e.b)-64<<10, 0)/n + 1
	}
	return &lazySnapshot{parts: []part{{b: e.b}}, names: e.names, buf: buf}, nil
}

// part is a run of a snapshot: encoded bytes, or messages to encode.
type part struct {
	b    []byte
	msgs []queue.Message
}

// lazySnapshot is a snapshot whose messages are encoded as it is written.
type lazySnapshot struct {
	parts []part
	names []queue.Body // the named bodies, gathered as the state was encoded
	// format is the header's: the messages are encoded in it too.
	format uint64
	// buf holds parts[0].b when it was encoded at once (snapshot).
	buf *offheap.Buffer
}

// Release gives back the snapshot's buffer: it must not be written after.
func (l *lazySnapshot) Release() {
	l.buf.Free()
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
	for _, p := range l.parts {
		if p.msgs == nil {
			if err := write(p.b); err != nil {
				return total, err
			}
			continue
		}
		for i := range p.msgs {
			encMessage(buf, &p.msgs[i])
			if len(buf.b) >= 64<<10 {
				if err := write(buf.b); err != nil {
					return total, err
				}
				buf.b = buf.b[:0]
			}
		}
		if err := write(buf.b); err != nil {
			return total, err
		}
		buf.b = buf.b[:0]
	}
	return total, nil
}

// Bodies lists the bodies the snapshot names, each once, in (Index, Pos)
// order: the node keeps them readable while the snapshot may be restored
// or sent to a follower. Inline bodies are in the snapshot itself.
func (l *lazySnapshot) Bodies() []queue.Body {
	out := l.names
	for _, p := range l.parts {
		for i := range p.msgs {
			if b := p.msgs[i].Body; b.Index != 0 {
				out = append(out, b)
			}
		}
	}
	slices.SortFunc(out, func(a, b queue.Body) int {
		if c := cmp.Compare(a.Index, b.Index); c != 0 {
			return c
		}
		return cmp.Compare(a.Pos, b.Pos)
	})
	return slices.CompactFunc(out, func(a, b queue.Body) bool { return a.Index == b.Index && a.Pos == b.Pos })
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
	return nil
}

// encDelayed writes the delayed messages in heap order (queue.Held): the
// sequence counter, then each message with its vhost, its due time in
// the place of a message's deadline.
func encDelayed(e *enc, s *state) {
	ds := &s.delayed
	e.u(ds.seq)
	e.u(uint64(ds.held.Len()))
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
