package group

import (
	"sync"

	gproto "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/proto"
)

// Request is one request waiting for its results: commands a local caller
// submitted, or one forwarded request. Its commands always travel in one
// log entry.
type Request struct {
	cmds []*proto.Command
	size int
	// Set on the leader by admit: the commands that go into the entry,
	// and the refusal of each command that does not (nil when all do).
	valid   []*proto.Command
	refused []*proto.Result
	once    sync.Once
	done    chan struct{}
	cb      func(res []*proto.Result, index uint64, err error)

	res   []*proto.Result
	index uint64
	err   error
}

// NewRequest is a request for cmds whose caller waits on Done.
func NewRequest(cmds []*proto.Command) *Request {
	size := 0
	for _, c := range cmds {
		size += gproto.Size(c)
	}
	return &Request{cmds: cmds, size: size, done: make(chan struct{})}
}

// NewRequestFunc is a request for cmds whose outcome goes to cb, called
// once, on the goroutine that finishes it; it has no Done.
func NewRequestFunc(cmds []*proto.Command, cb func(res []*proto.Result, index uint64, err error)) *Request {
	p := NewRequest(cmds)
	p.done, p.cb = nil, cb
	return p
}

// Commands are the request's commands; Size their encoded bytes.
func (p *Request) Commands() []*proto.Command { return p.cmds }
func (p *Request) Size() int                  { return p.size }

// Done is closed once the request finished (nil for NewRequestFunc).
func (p *Request) Done() <-chan struct{} { return p.done }

// Outcome is what the request finished with: valid once Done closed.
func (p *Request) Outcome() ([]*proto.Result, uint64, error) { return p.res, p.index, p.err }

// Finish records the outcome once; later calls are ignored.
func (p *Request) Finish(res []*proto.Result, index uint64, err error) {
	p.once.Do(func() {
		p.res, p.index, p.err = res, index, err
		if p.cb != nil {
			p.cb(res, index, err)
		}
		if p.done != nil {
			close(p.done)
		}
	})
}

// results merges the state machine's results of p's valid commands with
// the refusals of the others, in p's order.
func (p *Request) results(applied []*proto.Result, index uint64) []*proto.Result {
	if p.refused == nil {
		return applied
	}
	out := make([]*proto.Result, len(p.cmds))
	k := 0
	for i, r := range p.refused {
		if r != nil {
			r.Index = index
			out[i] = r
			continue
		}
		out[i] = applied[k]
		k++
	}
	return out
}
