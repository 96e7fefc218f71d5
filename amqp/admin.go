package amqp

import (
	"sort"
	"time"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

// List describes this node's open client connections, ordered by id.
func (s *Server) List() []*proto.ConnectionInfo {
	s.mu.Lock()
	conns := s.snapshotConns()
	s.mu.Unlock()
	out := make([]*proto.ConnectionInfo, 0, len(conns))
	for _, c := range conns {
		if !c.opened.Load() {
			continue
		}
		out = append(out, c.info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Id < out[j].Id })
	return out
}

// CloseConnection closes connection id with 320 CONNECTION_FORCED and
// reason as its text; false when there is no such connection.
func (s *Server) CloseConnection(id, reason string) bool {
	c := s.lookup(id)
	if c == nil {
		return false
	}
	c.fail(wire.ConnError(replycode.ConnectionForced, 0, 0, "%s", reason))
	return true
}

// Connections is the server as an admin service sees it: List and
// Close(id, reason).
type Connections struct{ s *Server }

// Connections returns the admin view of the server.
func (s *Server) Connections() Connections { return Connections{s} }

// List describes this node's open client connections.
func (a Connections) List() []*proto.ConnectionInfo { return a.s.List() }

// Close closes connection id with 320 CONNECTION_FORCED and reason.
func (a Connections) Close(id, reason string) bool { return a.s.CloseConnection(id, reason) }

func (c *conn) info() *proto.ConnectionInfo {
	c.mu.Lock()
	n := len(c.channels)
	c.mu.Unlock()
	return &proto.ConnectionInfo{
		Node:             c.srv.node().NodeID(),
		Id:               c.id,
		Peer:             c.nc.RemoteAddr().String(),
		User:             c.user,
		Vhost:            c.vhost,
		Channels:         uint32(n),
		ClientProduct:    c.clientProduct,
		ClientVersion:    c.clientVersion,
		UserProvidedName: c.clientName,
		ClientProperties: c.clientProps,
		ConnectedAtMs:    c.connectedAt.UnixMilli(),
		HeartbeatS:       uint32(c.heartbeatInterval() / time.Second),
		FrameMax:         c.frameMax,
	}
}
