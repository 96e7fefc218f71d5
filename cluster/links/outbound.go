package links

import (
	"context"
	"net"
	"time"

	"github.com/raftmq/raftmq/internal/connset"
)

// Outbound holds the connections this node dials to its peers (raft's
// transport and the internal gRPC service) so that Close can end them
// all at once. Whoever waits on one of them when the node stops (a vote
// asked of a peer whose address is gone, a heartbeat to a frozen one, a
// gRPC connection flushing its goodbye) would otherwise wait for its own
// timeout, and Close waits for them: raft's shutdown for its goroutines,
// gRPC's Close for its writer. A whole-cluster stop took 10 s on the last
// nodes down, the raft transport's timeout.
type Outbound struct {
	ctx    context.Context // ends at Abort: dials in progress give up
	cancel context.CancelFunc

	conns connset.Set
}

// NewOutbound returns an Outbound that dials until Abort.
func NewOutbound() *Outbound {
	ctx, cancel := context.WithCancel(context.Background())
	return &Outbound{ctx: ctx, cancel: cancel}
}

// Dial dials addr with dial, giving up when ctx ends or the node aborts,
// and keeps the connection until it is closed.
func (o *Outbound) Dial(ctx context.Context, addr string, timeout time.Duration,
	dial func(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error)) (net.Conn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(o.ctx, cancel)
	defer stop()
	c, err := dial(ctx, addr, timeout)
	if err != nil {
		return nil, err
	}
	oc, ok := o.conns.Add(c)
	if !ok {
		return nil, net.ErrClosed
	}
	return oc, nil
}

// Abort ends the dials in progress and closes every connection, and
// makes later dials fail.
func (o *Outbound) Abort() {
	o.cancel()
	o.conns.Close()
}
