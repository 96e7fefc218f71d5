// Package linksec secures the links between a cluster's nodes: the
// node's certificate and the cluster CA (TLS, from an operator's files or
// derived from the cluster secret), the gossip keys, and the checks of
// whom a link may reach (Checker). It knows the cluster only through what
// the node gives it (View).
package linksec

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/raftmq/raftmq/internal/certchain"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
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
		if err := CheckGossipKey(k); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("cluster: no gossip key given")
	}
	return keys, nil
}

// CheckGossipKey refuses a gossip key of a length AES does not take.
func CheckGossipKey(k []byte) error {
	switch len(k) {
	case 16, 24, 32:
		return nil
	}
	return fmt.Errorf("cluster: a gossip key must be 16, 24 or 32 bytes, not %d", len(k))
}
