package linksec

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"

	"google.golang.org/grpc/credentials"
)

// MinSecretLen is the shortest cluster secret accepted, in bytes.
const MinSecretLen = 16

// HKDF info strings: one derivation per use, so that no key serves two
// purposes. A "v1" names the derivation, not the secret: changing how a key
// is derived would need a new info string and a cluster-wide restart.
const (
	secretCAInfo     = "raftmq cluster secret: CA key v1"
	secretGossipInfo = "raftmq cluster secret: gossip key v1"
)

// secretCAName is the Common Name of the CA derived from a cluster secret.
const secretCAName = "raftmq cluster CA (derived from the cluster secret)"

// CheckSecret refuses a cluster secret too short to be one.
func CheckSecret(secret []byte) error {
	if len(secret) < MinSecretLen {
		return fmt.Errorf("cluster: the cluster secret is %d bytes, it must be at least %d (generate one with: openssl rand -base64 32)", len(secret), MinSecretLen)
	}
	return nil
}

// SecretTLS is the cluster TLS of a node that knows the cluster secret and
// has no operator CA: a CA whose Ed25519 key is derived from the secret
// (HKDF-SHA256), and a leaf certificate naming nodeID, with a key of its
// own, signed by that CA. Every node derives the same CA, so nodes that
// share the secret trust each other's leaves and nobody else's; the links
// between nodes then run the mutual TLS of TLS, encrypted.
//
// Unlike an operator's TLS, its gRPC server also takes connections without
// a client certificate, and plain ones (see ServerOptions): the admin API
// keeps serving raftmqctl, which holds no node certificate, while the
// internal service still requires one.
func SecretTLS(secret []byte, nodeID string) (*TLS, error) {
	if err := CheckSecret(secret); err != nil {
		return nil, err
	}
	ca, caKey, err := secretCA(secret)
	if err != nil {
		return nil, err
	}
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("cluster: node key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("cluster: certificate serial: %w", err)
	}
	now := time.Now()
	leaf := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: nodeID},
		// An hour of slack for peers whose clocks are behind; the leaf is
		// issued again at every start, so a long validity costs nothing.
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.AddDate(10, 0, 0),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, pub, caKey)
	if err != nil {
		return nil, fmt.Errorf("cluster: node certificate: %w", err)
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("cluster: node certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &TLS{
		Certificate:    tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: parsed},
		CA:             pool,
		caCert:         ca,
		fromSecret:     true,
		optionalClient: true,
	}, nil
}

// secretCA builds the CA of a secret. Every field is fixed and Ed25519
// signatures are deterministic, so every node builds the same bytes.
func secretCA(secret []byte) (*x509.Certificate, ed25519.PrivateKey, error) {
	seed, err := hkdf.Key(sha256.New, secret, nil, secretCAInfo, ed25519.SeedSize)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: derive the CA key: %w", err)
	}
	key := ed25519.NewKeyFromSeed(seed)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: secretCAName},
		NotBefore:             time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(nil, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: CA certificate: %w", err)
	}
	return ca, key, nil
}

// SecretGossipKey is the AES-256 gossip key derived from a cluster secret.
func SecretGossipKey(secret []byte) ([]byte, error) {
	if err := CheckSecret(secret); err != nil {
		return nil, err
	}
	k, err := hkdf.Key(sha256.New, secret, nil, secretGossipInfo, 32)
	if err != nil {
		return nil, fmt.Errorf("cluster: derive the gossip key: %w", err)
	}
	return k, nil
}

// FromSecret reports whether t was derived from a cluster secret.
func (t *TLS) FromSecret() bool { return t != nil && t.fromSecret }

// CAPEM is the PEM certificate of the CA derived from the cluster secret
// (nil for an operator's TLS): an admin client that trusts it can reach the
// gRPC port over TLS without holding the secret.
func (t *TLS) CAPEM() []byte {
	if t == nil || t.caCert == nil {
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: t.caCert.Raw})
}

// GRPCCredentials are the gRPC server's transport credentials for t. An
// operator's TLS requires a client certificate on every connection. A
// secret's TLS verifies a client certificate when one is given and also
// takes plain connections (told apart by their first byte), because the
// gRPC port serves the admin API to raftmqctl as well: the internal
// service checks the certificate of each call (Checker.AuthorizeInternal).
func (t *TLS) GRPCCredentials() credentials.TransportCredentials {
	c := t.ServerConfig()
	if !t.optionalClient {
		return recordCredentials{credentials.NewTLS(c)}
	}
	c.ClientAuth = tls.VerifyClientCertIfGiven
	return recordCredentials{&tlsOrPlain{tls: credentials.NewTLS(c)}}
}

// tlsOrPlain serves TLS to clients that start a TLS handshake and plain
// HTTP/2 to the others.
type tlsOrPlain struct {
	tls credentials.TransportCredentials
}

// tlsRecordHandshake is the first byte of a TLS connection (a handshake
// record); a plain gRPC connection starts with the HTTP/2 preface, "PRI".
const tlsRecordHandshake = 0x16

func (c *tlsOrPlain) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	// gRPC has set a deadline on raw for the handshake: a client that
	// sends nothing does not hold this for ever.
	br := bufio.NewReaderSize(raw, 1)
	first, err := br.Peek(1)
	if err != nil {
		return nil, nil, err
	}
	conn := &peekedConn{Conn: raw, r: br}
	if first[0] == tlsRecordHandshake {
		return c.tls.ServerHandshake(conn)
	}
	return conn, plainInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
}

func (c *tlsOrPlain) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c.tls.ClientHandshake(ctx, authority, raw)
}

func (c *tlsOrPlain) Info() credentials.ProtocolInfo { return c.tls.Info() }

func (c *tlsOrPlain) Clone() credentials.TransportCredentials {
	return &tlsOrPlain{tls: c.tls.Clone()}
}

// OverrideServerName is part of credentials.TransportCredentials.
func (c *tlsOrPlain) OverrideServerName(name string) error {
	return c.tls.OverrideServerName(name)
}

// plainInfo is the AuthInfo of a plain connection.
type plainInfo struct{ credentials.CommonAuthInfo }

func (plainInfo) AuthType() string { return "insecure" }

// peekedConn reads first what was peeked.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(b []byte) (int, error) { return c.r.Read(b) }
