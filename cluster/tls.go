package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/raftmq/raftmq/internal/certchain"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// TLS is a node's identity and trust on the links between nodes: the raft
// transport and the gRPC server (internal forwarding and the admin API).
// Every node presents its certificate and requires the peer's, and a peer
// is trusted when its chain verifies against the cluster CA.
//
// Host names play no part: nodes dial each other by advertised IP address,
// so a certificate is not matched against the address dialled. A node
// certificate is identified instead by the node id it names, as its
// Common Name or one of its DNS names: the raft transport and the
// forwarding service accept only certificates naming a member of the
// cluster, and a node dialling a known member requires the certificate to
// name that member. Certificates of the same CA that name no member (an
// administrator's client certificate) reach the gRPC server but not raft
// nor forwarding.
type TLS struct {
	// Certificate is this node's certificate chain and private key.
	Certificate tls.Certificate
	// CA holds the cluster CA certificates that sign node certificates.
	CA *x509.CertPool

	// Set by SecretTLS: the derived CA, and a gRPC server that takes
	// callers without a certificate (for the admin API).
	caCert         *x509.Certificate
	fromSecret     bool
	optionalClient bool
}

// LoadTLS reads a PEM certificate (chain), its PEM private key and the
// cluster CA's PEM certificates from files.
func LoadTLS(certFile, keyFile, caFile string) (*TLS, error) {
	if certFile == "" || keyFile == "" || caFile == "" {
		return nil, errors.New("cluster: TLS needs a certificate, a key and a CA")
	}
	cert, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("cluster: TLS certificate: %w", err)
	}
	key, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("cluster: TLS key: %w", err)
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("cluster: TLS CA: %w", err)
	}
	return NewTLS(cert, key, ca)
}

// NewTLS builds a TLS from PEM blocks.
func NewTLS(certPEM, keyPEM, caPEM []byte) (*TLS, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("cluster: TLS key pair: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("cluster: TLS CA: no PEM certificate found")
	}
	return &TLS{Certificate: cert, CA: pool}, nil
}

// ServerConfig is the configuration of a listener: it presents this node's
// certificate and requires a client certificate signed by the cluster CA.
func (t *TLS) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{t.Certificate},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    t.CA,
	}
}

// ClientConfig is the configuration of a dial: it presents this node's
// certificate and verifies the server's chain against the cluster CA, but
// not the host name (see TLS).
func (t *TLS) ClientConfig() *tls.Config {
	return t.clientConfig(nil)
}

// clientConfig is ClientConfig with a further check of the verified leaf
// (nil: none).
func (t *TLS) clientConfig(check func(*x509.Certificate) error) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{t.Certificate},
		// The chain is verified in VerifyConnection, without the host name
		// that crypto/tls would otherwise require to match.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			leaf, err := certchain.Verify(t.CA, cs.PeerCertificates, x509.ExtKeyUsageServerAuth)
			if err != nil {
				return err
			}
			if check != nil {
				return check(leaf)
			}
			return nil
		},
	}
}

// CertNames are the names a certificate gives its holder: its Common Name
// and its DNS names. A node certificate names the node id among them.
func CertNames(c *x509.Certificate) []string {
	var out []string
	if c.Subject.CommonName != "" {
		out = append(out, c.Subject.CommonName)
	}
	for _, d := range c.DNSNames {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// PeerCertificate returns the verified certificate of a gRPC call's peer,
// or nil when the call did not come over TLS with a client certificate.
func PeerCertificate(ctx context.Context) *x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return nil
	}
	return ti.State.VerifiedChains[0][0]
}

// ServerOptions are the gRPC server options a node's gRPC server needs:
// message sizes for forwarded publishes, a keepalive policy that lets
// followers ping at forwardKeepalive (gRPC's default policy answers such
// pings with GOAWAY "too_many_pings", which breaks the forwarding stream),
// and, given a non-nil TLS (at most one), its server credentials: an
// operator's TLS requires a client certificate signed by the cluster CA on
// every connection; a secret's TLS (SecretTLS) verifies one when given and
// also serves plain connections, and the internal service refuses calls
// without a node certificate either way.
func ServerOptions(sec ...*TLS) []grpc.ServerOption {
	opts := baseServerOptions()
	if len(sec) > 0 && sec[0] != nil {
		opts = append(opts, grpc.Creds(sec[0].grpcCredentials()))
	}
	return opts
}

// ParseGossipKeys decodes a comma-separated list of base64 gossip keys of
// 16, 24 or 32 bytes (AES-128, -192 or -256). The first key encrypts what
// the node sends; every key is tried on what it receives, so a new key can
// be rolled out before it becomes the first everywhere.
func ParseGossipKeys(s string) ([][]byte, error) {
	var keys [][]byte
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(part)
		if err != nil {
			return nil, fmt.Errorf("cluster: gossip key is not base64: %w", err)
		}
		if err := checkGossipKey(k); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("cluster: no gossip key given")
	}
	return keys, nil
}

func checkGossipKey(k []byte) error {
	switch len(k) {
	case 16, 24, 32:
		return nil
	}
	return fmt.Errorf("cluster: a gossip key must be 16, 24 or 32 bytes, not %d", len(k))
}

// gossipMember reports whether one of names is the id of a gossip member
// (not this node itself).
func (n *Node) gossipMember(names []string) bool {
	for id := range n.members.all() {
		if id != n.cfg.NodeID && slices.Contains(names, id) {
			return true
		}
	}
	return false
}

// inConfiguration reports whether one of names is the id of a server in the
// latest raft configuration this node has (not this node itself). On the
// leader that includes a server being added.
func (n *Node) inConfiguration(names []string) bool {
	r := n.group.Raft()
	if r == nil {
		return false
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) != n.cfg.NodeID && slices.Contains(names, string(s.ID)) {
			return true
		}
	}
	return false
}

// leaderKnown reports whether this node's raft knows a current leader.
func (n *Node) leaderKnown() bool {
	r := n.group.Raft()
	if r == nil {
		return false
	}
	_, id := r.LeaderWithID()
	return id != ""
}

// checkRaftPeer decides who may open a raft connection to this node: a
// server of its raft configuration. A node that knows no leader also takes
// a gossip member: it is new and the leader that adds it is in no
// configuration it has yet, or it restarted with a configuration older than
// the current leader (added while it was down); once it hears from a
// leader it is strict again.
func (n *Node) checkRaftPeer(c *x509.Certificate) error {
	names := CertNames(c)
	if n.inConfiguration(names) {
		return nil
	}
	if !n.leaderKnown() && n.gossipMember(names) {
		return nil
	}
	return fmt.Errorf("cluster: the peer certificate names %q, no server of the raft configuration", names)
}

// authorizeInternal decides an internal call (Forward and every other
// method of the Internal service): its caller must present a node
// certificate of the cluster (chain verified by the TLS handshake) naming a
// server of the raft configuration. A gossip member is not enough: gossip
// takes anyone who holds the gossip key, and an operator's CA may also
// sign administrators' client certificates. Without TLS (in-process tests
// only: the raftmq command always sets the secret's or an operator's) every
// call is taken.
func (n *Node) authorizeInternal(ctx context.Context) error {
	if n.cfg.TLS == nil {
		return nil
	}
	c := PeerCertificate(ctx)
	if c == nil {
		return status.Error(codes.Unauthenticated, errNoCertificate.Error())
	}
	if names := CertNames(c); !n.inConfiguration(names) {
		return status.Errorf(codes.PermissionDenied, "cluster: the certificate names %q, no server of the raft configuration", names)
	}
	return nil
}

// peerID is the id of the member whose raft or gRPC address is addr, or "".
func (n *Node) peerID(addr string) string {
	for id, m := range n.members.all() {
		if m.meta.GetRaftAddr() == addr || m.meta.GetGrpcAddr() == addr {
			return id
		}
	}
	if r := n.group.Raft(); r != nil {
		if f := r.GetConfiguration(); f.Error() == nil {
			for _, s := range f.Configuration().Servers {
				if string(s.Address) == addr {
					return string(s.ID)
				}
			}
		}
	}
	return ""
}

// checkPeerCert accepts a verified peer certificate that names a known
// member (gossip or raft configuration); want, when not empty, is the
// member the certificate must name. It checks the nodes this node dials;
// checkRaftPeer and authorizeInternal check those that call it.
func (n *Node) checkPeerCert(c *x509.Certificate, want string) error {
	names := CertNames(c)
	if want != "" {
		if slices.Contains(names, want) {
			return nil
		}
		return fmt.Errorf("cluster: the certificate of %s names %q, not the node", want, names)
	}
	if n.gossipMember(names) || n.inConfiguration(names) {
		return nil
	}
	return fmt.Errorf("cluster: the peer certificate names %q, no member of the cluster", names)
}

// tlsServerConfig is the raft listener's configuration: the cluster CA's
// chain check, then checkRaftPeer.
func (n *Node) tlsServerConfig() *tls.Config {
	c := n.cfg.TLS.ServerConfig()
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
			return errors.New("cluster: the peer presented no verified certificate")
		}
		return n.checkRaftPeer(cs.VerifiedChains[0][0])
	}
	return c
}

// tlsClientConfig is the configuration to dial addr: the server must name
// the member known at addr, or some member when none is known there.
func (n *Node) tlsClientConfig(addr string) *tls.Config {
	return n.cfg.TLS.clientConfig(func(c *x509.Certificate) error {
		return n.checkPeerCert(c, n.peerID(addr))
	})
}

// dialTLS dials addr through Links and completes a TLS handshake within
// timeout.
func (n *Node) dialTLS(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error) {
	raw, err := n.cfg.Links.dial(ctx, addr, timeout)
	if err != nil {
		return nil, err
	}
	c := tls.Client(raw, n.tlsClientConfig(addr))
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := c.HandshakeContext(hctx); err != nil {
		_ = raw.Close()
		return nil, fmt.Errorf("cluster: TLS with %s: %w", addr, err)
	}
	return c, nil
}

// verifyPeer checks, before the leader adds a member as a voter, that the
// member's raft address answers with a certificate of the cluster CA naming
// the member. Without TLS there is nothing to check. A member that failed
// is not dialled again for verifyRetry: a misconfigured node must not cost
// the leader a handshake at every reconcile and member event.
func (n *Node) verifyPeer(ctx context.Context, id, addr string) error {
	if n.cfg.TLS == nil {
		return nil
	}
	key := id + "@" + addr
	n.verifyMu.Lock()
	f, failed := n.verifyFailed[key]
	n.verifyMu.Unlock()
	if failed && time.Since(f.at) < verifyRetry {
		return f.err
	}
	err := n.dialVerify(ctx, id, addr)
	n.verifyMu.Lock()
	defer n.verifyMu.Unlock()
	if err == nil {
		delete(n.verifyFailed, key)
		return nil
	}
	if n.verifyFailed == nil {
		n.verifyFailed = map[string]verifyFailure{}
	}
	for k, f := range n.verifyFailed {
		if time.Since(f.at) >= verifyRetry {
			delete(n.verifyFailed, k)
		}
	}
	n.verifyFailed[key] = verifyFailure{at: time.Now(), err: err}
	return err
}

// verifyRetry is how long a member whose certificate failed the check is
// not checked again.
const verifyRetry = 2 * time.Second

// linkSecurity is what the links' certificates told: the members whose
// certificate failed, by id@addr, not checked again before verifyRetry.
type linkSecurity struct {
	verifyMu     sync.Mutex
	verifyFailed map[string]verifyFailure
}

type verifyFailure struct {
	at  time.Time
	err error
}

func (n *Node) dialVerify(ctx context.Context, id, addr string) error {
	c, err := n.dialTLS(ctx, addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	cert := c.(*tls.Conn).ConnectionState().PeerCertificates[0]
	return n.checkPeerCert(cert, id)
}
