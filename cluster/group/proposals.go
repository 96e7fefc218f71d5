package group

import (
	"sync"
	"unsafe"

	"github.com/raftmq/raftmq/proto"
)

// Proposals are the Envelopes this node proposed as leader and has not yet
// applied, keyed by the entry bytes raft was given. raft hands the leader's
// state machine the same bytes it was given, so the leader applies the
// Envelope it built instead of decoding its own encoding of it: decoding
// copies every message body and was a sixth of the leader's CPU under
// load. Followers, and the leader for an entry it did not propose in this
// term (or a proposal whose outcome it lost), decode. The state machine
// treats an Envelope as read-only either way, and every field it reads
// comes out of the encoding as it went in, so both paths apply the same
// commands.
type Proposals struct {
	mu sync.Mutex
	m  map[*byte]*proto.Envelope
}

// Put remembers env, proposed as data.
func (p *Proposals) Put(data []byte, env *proto.Envelope) {
	p.mu.Lock()
	if p.m == nil {
		p.m = map[*byte]*proto.Envelope{}
	}
	p.m[unsafe.SliceData(data)] = env
	p.mu.Unlock()
}

// Take returns and forgets the Envelope proposed as data, or nil.
func (p *Proposals) Take(data []byte) *proto.Envelope {
	if len(data) == 0 {
		return nil
	}
	k := unsafe.SliceData(data)
	p.mu.Lock()
	env := p.m[k]
	if env != nil {
		delete(p.m, k)
	}
	p.mu.Unlock()
	return env
}

// Drop forgets a proposal that failed.
func (p *Proposals) Drop(data []byte) { p.Take(data) }

// Len is how many proposals wait to be applied.
func (p *Proposals) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m)
}
