package cluster

import "context"

// untilClosed returns a context that ends with parent or when the node
// closes, whichever comes first. Calls to peers and proposals made
// outside a leader's term stop with it, rather than run out their
// timeout after Close. Cancel it when done: that also ends its watch.
func (n *Node) untilClosed(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		select {
		case <-n.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
