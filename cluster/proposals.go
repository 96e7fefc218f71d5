package cluster

import (
	"sync"
	"unsafe"

	"github.com/raftmq/raftmq/proto"
)

// proposals are the Envelopes this node proposed as leader and has not yet
// applied, keyed by the entry bytes raft was given. raft hands the leader's
// state machine the same bytes it was given, so the leader applies the
// Envelope it built instead of decoding its own encoding of it: decoding
// copies every message body and was a sixth of the leader's CPU under
// load. Followers, and the leader for an entry it did not propose in this
// term (or a proposal whose outcome it lost), decode. The state machine
// treats an Envelope as read-only either way, and every field it reads
// comes out of the encoding as it went in, so both paths apply the same
// commands.
type proposals struct {
	mu sync.Mutex
	m  map[*byte]*proto.Envelope
}

func (p *proposals) put(data []byte, env *proto.Envelope) {
	p.mu.Lock()
	if p.m == nil {
		p.m = map[*byte]*proto.Envelope{}
	}
	p.m[unsafe.SliceData(data)] = env
	p.mu.Unlock()
}

// take returns and forgets the Envelope proposed as data, or nil.
func (p *proposals) take(data []byte) *proto.Envelope {
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

// drop forgets a proposal that failed.
func (p *proposals) drop(data []byte) { p.take(data) }

// len is how many proposals wait to be applied.
func (p *proposals) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m)
}
