// Package client dials a node's raftmq.v1.Admin service as an operator's
// tool does: a user's basic credentials per call, and TLS that checks the
// node's certificate against the cluster CA.
//
// It imports proto and gRPC only, so raftmqctl links neither the cluster
// (raft, memberlist) nor the server's front ends (Prometheus); the node
// reads the same credentials back (AuthorizationKey).
package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/raftmq/raftmq/internal/certchain"
	"github.com/raftmq/raftmq/proto"
)

// AuthorizationKey is the call metadata that carries basic credentials:
// "Basic base64(username:password)", as HTTP basic authentication does.
const AuthorizationKey = "authorization"

// SecretKey is the call metadata that carries a node's local admin
// secret: the content of SecretFileName in its data dir, which only the
// broker's OS user can read, as rabbitmqctl proves itself with the Erlang
// cookie.
const SecretKey = "raftmq-admin-secret"

// SecretFileName is the file, in a node's data dir, that holds its local
// admin secret.
const SecretFileName = "admin-secret"

// DefaultDataDir is raftmq's data dir when none is given, relative to the
// working directory; raftmqctl looks for the secret there by default.
const DefaultDataDir = "raftmq-data"

// ReadSecret reads a local admin secret file (surrounding white space is
// not part of the secret).
func ReadSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s: empty admin secret file", path)
	}
	return s, nil
}

// SecretCredentials are per-call credentials carrying a node's local admin
// secret.
type SecretCredentials struct{ Secret string }

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (s SecretCredentials) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{SecretKey: s.Secret}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials: the
// secret is sent to a node on the same host (loopback) in clear, and
// beyond it the node takes it only over TLS.
func (SecretCredentials) RequireTransportSecurity() bool { return false }

var _ credentials.PerRPCCredentials = SecretCredentials{}

// BasicCredentials are per-call credentials carrying a username and
// password for the Admin service. They may travel without TLS (loopback);
// beyond loopback, use TLS so the password is not sent in clear.
type BasicCredentials struct {
	Username, Password string
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b BasicCredentials) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	tok := base64.StdEncoding.EncodeToString([]byte(b.Username + ":" + b.Password))
	return map[string]string{AuthorizationKey: "Basic " + tok}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (BasicCredentials) RequireTransportSecurity() bool { return false }

var _ credentials.PerRPCCredentials = BasicCredentials{}

// ParseBasic reads the username and password of an AuthorizationKey value
// ("Basic " and base64 of "user:password").
func ParseBasic(v string) (user, password string, ok bool) {
	enc, found := strings.CutPrefix(v, "Basic ")
	if !found {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return "", "", false
	}
	return strings.Cut(string(raw), ":")
}

// TLS is the TLS configuration of an admin client (raftmqctl): it verifies
// the node's certificate against the CA in caFile, not its host name (nodes
// are often reached by IP address), and presents the client certificate in
// certFile and keyFile when given (a node with cluster TLS requires one
// signed by the cluster CA).
func TLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" {
		return nil, errors.New("TLS needs the cluster CA certificate (--tls-ca)")
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s: no PEM certificate found", caFile)
	}
	c := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // the chain is verified below, without the host name
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := certchain.Verify(pool, cs.PeerCertificates, x509.ExtKeyUsageServerAuth)
			return err
		},
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("a client certificate needs its key, and a key its certificate (--tls-cert, --tls-key)")
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// Security is how a client authenticates to a node; every field is
// optional.
type Security struct {
	// Username and Password are sent with every call when Username is set.
	Username, Password string
	// Secret is a node's local admin secret (ReadSecret), sent with
	// every call when set.
	Secret string
	// CAFile, CertFile and KeyFile turn TLS on (see TLS).
	CAFile, CertFile, KeyFile string
}

// Dial returns an Admin client of the node at addr. The connection is
// established by the first call.
func Dial(addr string, sec Security) (proto.AdminClient, error) {
	creds := insecure.NewCredentials()
	if sec.CAFile != "" || sec.CertFile != "" || sec.KeyFile != "" {
		c, err := TLS(sec.CAFile, sec.CertFile, sec.KeyFile)
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(c)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if sec.Username != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(BasicCredentials{Username: sec.Username, Password: sec.Password}))
	}
	if sec.Secret != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(SecretCredentials{Secret: sec.Secret}))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	return proto.NewAdminClient(cc), nil
}
