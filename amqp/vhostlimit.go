package amqp

import (
	"context"
	"time"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/internal/replycode"
)

// ConnectionLimiter is what a Broker also implements to enforce the
// vhosts' max-connections limits (RabbitMQ's vhost-limits) at
// connection.open.
type ConnectionLimiter interface {
	// VhostConnectionLimit is the vhost's max-connections and whether it
	// limits (set and not negative).
	VhostConnectionLimit(vhost string) (int64, bool)
	// PeerConnections counts the vhost's connections on the other nodes
	// of the cluster, as many as answer in time.
	PeerConnections(ctx context.Context, vhost string) int
}

// peerCountTimeout bounds how long a connection.open waits for the other
// nodes' counts of a limited vhost's connections.
const peerCountTimeout = 2 * time.Second

// vhostConnLimit returns the refusal of a connection to vhost when the
// vhost's connections, this node's opened ones and those the other nodes
// report, reach its max-connections; nil when it has no such limit or is
// below it. It runs before the connection counts as opened: connections
// opening at once on several nodes may each see room for one more, as
// RabbitMQ's eventually consistent count lets them.
func (c *conn) vhostConnLimit(vhost string) *wire.Error {
	l, ok := c.srv.node().(ConnectionLimiter)
	if !ok {
		return nil
	}
	max, limited := l.VhostConnectionLimit(vhost)
	if !limited {
		return nil
	}
	n := int64(c.srv.vhostConns(vhost))
	if n < max {
		ctx, cancel := context.WithTimeout(context.Background(), peerCountTimeout)
		n += int64(l.PeerConnections(ctx, vhost))
		cancel()
	}
	if n < max {
		return nil
	}
	c.logger().Warn("connection refused: vhost connection limit reached", "vhost", vhost, "limit", max)
	return wire.ConnError(replycode.NotAllowed, 10, 40, "access to vhost '%s' refused for user '%s': connection limit (%d) is reached", vhost, c.user, max)
}

// vhostConns counts this node's opened connections to vhost.
func (s *Server) vhostConns(vhost string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.conns {
		if c.opened.Load() && c.vhost == vhost {
			n++
		}
	}
	return n
}
