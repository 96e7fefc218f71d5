package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/internal/connset"
)

// network is the node's links to the other nodes: raft's transport and
// the address peers dial it at, the connections it dialed (ended by
// Close), and those that carry direct replies (reply.go).
type network struct {
	trans      *raft.NetworkTransport
	advert     string    // advertised raft address
	out        *outbound // the connections it dialed, ended by Close
	replyConns peerConns // direct replies to other nodes (reply.go)
}

// streamLayer is the raft TCP transport's network, routed through Links.
// With tls set, accepted connections are TLS servers (the handshake runs on
// the connection's first read, in raft's handler, not in Accept) and dial
// dials TLS.
type streamLayer struct {
	ln     net.Listener
	advert string
	links  *Links
	tls    *tls.Config
	dial   func(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error)

	// out dials: the node's Close ends those connections.
	out *outbound

	accepted connset.Set
}

// Accept implements net.Listener; it keeps the connections so that Close
// can drop them (raft's transport leaves accepted connections open).
func (s *streamLayer) Accept() (net.Conn, error) {
	c, err := s.ln.Accept()
	if err != nil {
		return nil, err
	}
	if s.tls != nil {
		c = tls.Server(c, s.tls)
	}
	ac, ok := s.accepted.Add(c)
	if !ok {
		return nil, net.ErrClosed
	}
	return ac, nil
}

// Close implements net.Listener and closes every accepted connection.
func (s *streamLayer) Close() error {
	err := s.ln.Close()
	s.accepted.Close()
	return err
}

func (s *streamLayer) Addr() net.Addr { return advertAddr(s.advert) }
func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	dial := s.links.dial
	if s.dial != nil {
		dial = s.dial
	}
	return s.out.dial(context.Background(), string(addr), timeout, dial)
}

type advertAddr string

func (a advertAddr) Network() string { return "tcp" }
func (a advertAddr) String() string  { return string(a) }

// advertiseAddr picks the address peers dial: the explicit one, else the
// listener's, with an unspecified host replaced by a private IP.
func advertiseAddr(explicit, listen string) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("cluster: address %q: %w", listen, err)
	}
	ip := net.ParseIP(host)
	if ip != nil && !ip.IsUnspecified() {
		return listen, nil
	}
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
				return net.JoinHostPort(ipn.IP.String(), port), nil
			}
		}
	}
	return net.JoinHostPort("127.0.0.1", port), nil
}
