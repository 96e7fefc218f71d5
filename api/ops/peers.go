package ops

import (
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/raftmq/raftmq/proto"
)

// PeerPool dials other nodes' Admin services and caches one client
// connection per address.
type PeerPool struct {
	opts  []grpc.DialOption
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn // Locks: mu held
}

// NewPeerPool returns a pool dialing with opts; with none it uses insecure
// transport credentials.
func NewPeerPool(opts ...grpc.DialOption) *PeerPool {
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	return &PeerPool{opts: opts, conns: make(map[string]*grpc.ClientConn)}
}

// Admin returns an Admin client for the node at addr, creating its
// connection on first use (the connection itself is established lazily).
func (p *PeerPool) Admin(addr string) (proto.AdminClient, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cc, ok := p.conns[addr]; ok {
		return proto.NewAdminClient(cc), nil
	}
	cc, err := grpc.NewClient(addr, p.opts...)
	if err != nil {
		return nil, fmt.Errorf("api: dial %s: %w", addr, err)
	}
	p.conns[addr] = cc
	return proto.NewAdminClient(cc), nil
}

// Close closes every cached connection.
func (p *PeerPool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var first error
	for addr, cc := range p.conns {
		if err := cc.Close(); err != nil && first == nil {
			first = err
		}
		delete(p.conns, addr)
	}
	return first
}
