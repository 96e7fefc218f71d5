package links

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/internal/connset"
)

// StreamLayer is the raft TCP transport's network, routed through Links.
// With TLS set, accepted connections are TLS servers (the handshake runs on
// the connection's first read, in raft's handler, not in Accept) and Dial
// dials TLS.
type StreamLayer struct {
	ln     net.Listener
	advert string
	links  *Links
	tls    *tls.Config
	dial   func(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error)

	// out dials: the node's Close ends those connections.
	out *Outbound

	accepted connset.Set
}

// LayerConfig is what a StreamLayer is made of.
type LayerConfig struct {
	Listener net.Listener
	Advert   string // the address peers dial
	Links    *Links
	// TLS, when set, makes accepted connections TLS servers.
	TLS *tls.Config
	// Dial dials a peer (TLS, with the links' security); nil dials
	// through Links alone.
	Dial func(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error)
	// Out keeps the dialled connections, for the node's Close to end.
	Out *Outbound
}

// NewStreamLayer returns the stream layer cfg describes.
func NewStreamLayer(cfg LayerConfig) *StreamLayer {
	return &StreamLayer{ln: cfg.Listener, advert: cfg.Advert, links: cfg.Links, tls: cfg.TLS, dial: cfg.Dial, out: cfg.Out}
}

// Accept implements net.Listener; it keeps the connections so that Close
// can drop them (raft's transport leaves accepted connections open).
func (s *StreamLayer) Accept() (net.Conn, error) {
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
func (s *StreamLayer) Close() error {
	err := s.ln.Close()
	s.accepted.Close()
	return err
}

// Addr implements net.Listener: the advertised address.
func (s *StreamLayer) Addr() net.Addr { return advertAddr(s.advert) }

// Dial implements raft.StreamLayer, through Out.
func (s *StreamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	dial := s.links.Dial
	if s.dial != nil {
		dial = s.dial
	}
	return s.out.Dial(context.Background(), string(addr), timeout, dial)
}

// advertAddr is an advertised address as a net.Addr.
type advertAddr string

func (a advertAddr) Network() string { return "tcp" }
func (a advertAddr) String() string  { return string(a) }

// AdvertiseAddr picks the address peers dial: the explicit one, else the
// listener's, with an unspecified host replaced by a private IP.
func AdvertiseAddr(explicit, listen string) (string, error) {
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
