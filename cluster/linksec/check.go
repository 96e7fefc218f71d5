package linksec

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// View is what the checks need to know of the cluster, as the node sees
// it now. Every func is called on each check, never kept.
type View struct {
	// Self is this node's id: a certificate naming it names no peer.
	Self string
	// Members lists the ids of the gossip members.
	Members func() []string
	// Servers lists the ids of the servers of the latest raft
	// configuration this node has (on the leader, a server being added
	// too); nil when it has none.
	Servers func() []string
	// LeaderKnown reports whether this node's raft knows a current leader.
	LeaderKnown func() bool
	// PeerID is the id of the member whose raft or gRPC address is addr,
	// or "".
	PeerID func(addr string) string
}

// Dialer dials a plain connection within timeout (the node routes it
// through its fault-injection links).
type Dialer func(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error)

// Checker decides who may reach this node over its links, and whom this
// node accepts at the other end of a link it opens. It keeps the members
// whose certificate failed the check, by id@addr, not checked again
// before verifyRetry. A Checker of a nil TLS takes everyone: the links are
// plain (in-process tests only).
type Checker struct {
	tls  *TLS
	view View
	dial Dialer

	verifyMu     sync.Mutex
	verifyFailed map[string]verifyFailure
}

type verifyFailure struct {
	at  time.Time
	err error
}

// verifyRetry is how long a member whose certificate failed the check is
// not checked again.
const verifyRetry = 2 * time.Second

// errNoCertificate is returned to an internal call without a node
// certificate.
var errNoCertificate = errors.New("the internal service needs a node certificate of this cluster (the cluster secret or cluster TLS)")

// NewChecker returns the checks of links secured by t (nil: plain links),
// for a node whose cluster view is v and whose plain dial is dial.
func NewChecker(t *TLS, v View, dial Dialer) *Checker {
	return &Checker{tls: t, view: v, dial: dial}
}

// Secured reports whether the links run TLS.
func (c *Checker) Secured() bool { return c.tls != nil }

// gossipMember reports whether one of names is the id of a gossip member
// (not this node itself).
func (c *Checker) gossipMember(names []string) bool {
	for _, id := range c.view.Members() {
		if id != c.view.Self && slices.Contains(names, id) {
			return true
		}
	}
	return false
}

// inConfiguration reports whether one of names is the id of a server in the
// latest raft configuration this node has (not this node itself). On the
// leader that includes a server being added.
func (c *Checker) inConfiguration(names []string) bool {
	for _, id := range c.view.Servers() {
		if id != c.view.Self && slices.Contains(names, id) {
			return true
		}
	}
	return false
}

// checkRaftPeer decides who may open a raft connection to this node: a
// server of its raft configuration. A node that knows no leader also takes
// a gossip member: it is new and the leader that adds it is in no
// configuration it has yet, or it restarted with a configuration older than
// the current leader (added while it was down); once it hears from a
// leader it is strict again.
func (c *Checker) checkRaftPeer(cert *x509.Certificate) error {
	names := CertNames(cert)
	if c.inConfiguration(names) {
		return nil
	}
	if !c.view.LeaderKnown() && c.gossipMember(names) {
		return nil
	}
	return fmt.Errorf("cluster: the peer certificate names %q, no server of the raft configuration", names)
}

// AuthorizeInternal decides an internal call (Forward and every other
// method of the Internal service): its caller must present a node
// certificate of the cluster (chain verified by the TLS handshake) naming a
// server of the raft configuration. A gossip member is not enough: gossip
// takes anyone who holds the gossip key, and an operator's CA may also
// sign administrators' client certificates. Without TLS (in-process tests
// only: the raftmq command always sets the secret's or an operator's) every
// call is taken.
func (c *Checker) AuthorizeInternal(ctx context.Context) error {
	if c.tls == nil {
		return nil
	}
	cert := PeerCertificate(ctx)
	if cert == nil {
		return status.Error(codes.Unauthenticated, errNoCertificate.Error())
	}
	if names := CertNames(cert); !c.inConfiguration(names) {
		return status.Errorf(codes.PermissionDenied, "cluster: the certificate names %q, no server of the raft configuration", names)
	}
	return nil
}

// checkPeerCert accepts a verified peer certificate that names a known
// member (gossip or raft configuration); want, when not empty, is the
// member the certificate must name. It checks the nodes this node dials;
// checkRaftPeer and AuthorizeInternal check those that call it.
func (c *Checker) checkPeerCert(cert *x509.Certificate, want string) error {
	names := CertNames(cert)
	if want != "" {
		if slices.Contains(names, want) {
			return nil
		}
		return fmt.Errorf("cluster: the certificate of %s names %q, not the node", want, names)
	}
	if c.gossipMember(names) || c.inConfiguration(names) {
		return nil
	}
	return fmt.Errorf("cluster: the peer certificate names %q, no member of the cluster", names)
}

// RaftServerConfig is the raft listener's configuration: the cluster CA's
// chain check, then the raft peer check. Nil without TLS.
func (c *Checker) RaftServerConfig() *tls.Config {
	if c.tls == nil {
		return nil
	}
	sc := c.tls.ServerConfig()
	sc.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
			return errors.New("cluster: the peer presented no verified certificate")
		}
		return c.checkRaftPeer(cs.VerifiedChains[0][0])
	}
	return sc
}

// InternalCredentials are the credentials to call the internal service of
// node id: with TLS, the server's certificate must name id.
func (c *Checker) InternalCredentials(id string) credentials.TransportCredentials {
	if c.tls == nil {
		return insecure.NewCredentials()
	}
	return recordCredentials{credentials.NewTLS(c.tls.clientConfig(func(cert *x509.Certificate) error {
		return c.checkPeerCert(cert, id)
	}))}
}

// clientConfig is the configuration to dial addr: the server must name
// the member known at addr, or some member when none is known there.
func (c *Checker) clientConfig(addr string) *tls.Config {
	return c.tls.clientConfig(func(cert *x509.Certificate) error {
		return c.checkPeerCert(cert, c.view.PeerID(addr))
	})
}

// Dial dials addr and, with TLS, completes a handshake within timeout; the
// connection's writes hand the socket their records together (recordConn).
func (c *Checker) Dial(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error) {
	raw, err := c.dial(ctx, addr, timeout)
	if err != nil || c.tls == nil {
		return raw, err
	}
	rc, tc := recordClient(raw, c.clientConfig(addr))
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		_ = raw.Close()
		return nil, fmt.Errorf("cluster: TLS with %s: %w", addr, err)
	}
	return rc, nil
}

// VerifyPeer checks, before the leader adds a member as a voter, that the
// member's raft address answers with a certificate of the cluster CA naming
// the member. Without TLS there is nothing to check. A member that failed
// is not dialled again for verifyRetry: a misconfigured node must not cost
// the leader a handshake at every reconcile and member event.
func (c *Checker) VerifyPeer(ctx context.Context, id, addr string) error {
	if c.tls == nil {
		return nil
	}
	key := id + "@" + addr
	c.verifyMu.Lock()
	f, failed := c.verifyFailed[key]
	c.verifyMu.Unlock()
	if failed && time.Since(f.at) < verifyRetry {
		return f.err
	}
	err := c.dialVerify(ctx, id, addr)
	c.verifyMu.Lock()
	defer c.verifyMu.Unlock()
	if err == nil {
		delete(c.verifyFailed, key)
		return nil
	}
	if c.verifyFailed == nil {
		c.verifyFailed = map[string]verifyFailure{}
	}
	for k, f := range c.verifyFailed {
		if time.Since(f.at) >= verifyRetry {
			delete(c.verifyFailed, k)
		}
	}
	c.verifyFailed[key] = verifyFailure{at: time.Now(), err: err}
	return err
}

func (c *Checker) dialVerify(ctx context.Context, id, addr string) error {
	conn, err := c.Dial(ctx, addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	cert := conn.(interface{ ConnectionState() tls.ConnectionState }).ConnectionState().PeerCertificates[0]
	return c.checkPeerCert(cert, id)
}
