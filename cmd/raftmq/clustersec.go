package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/raftmq/raftmq/api/client"
	"github.com/raftmq/raftmq/api/grpcadmin"
	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/linksec"
)

// clusterSecurity are the settings that protect the links between nodes and
// the admin API (see docs/security.md).
type clusterSecurity struct {
	TLSCert string
	TLSKey  string
	TLSCA   string
	// Secret (or the content of SecretFile) is the cluster secret every
	// node shares; without cluster TLS it secures the links between nodes.
	Secret     string
	SecretFile string
	GossipKey  string
	AdminAuth  string
	// AdminPlaintext lets admin credentials from beyond loopback arrive
	// without TLS.
	AdminPlaintext bool
}

func (s *clusterSecurity) flags(fs *flag.FlagSet) {
	fs.StringVar(&s.TLSCert, "cluster-tls-cert", "", "PEM certificate of this node for mutual TLS between nodes and on the gRPC port (names the node id)")
	fs.StringVar(&s.TLSKey, "cluster-tls-key", "", "PEM private key of --cluster-tls-cert")
	fs.StringVar(&s.TLSCA, "cluster-tls-ca", "", "PEM certificate of the cluster CA that signs node and admin client certificates")
	fs.StringVar(&s.Secret, "cluster-secret", "", "secret shared by every node of the cluster (at least 16 bytes): without --cluster-tls-*, raft, forwarding and gossip run over TLS and encryption derived from it; a lone node without one generates one in its data dir")
	fs.StringVar(&s.SecretFile, "cluster-secret-file", "", "file holding the cluster secret (surrounding white space ignored), instead of --cluster-secret")
	fs.StringVar(&s.GossipKey, "gossip-key", "", "base64 key of 16, 24 or 32 bytes encrypting gossip (comma-separated: the first encrypts, all decrypt)")
	fs.StringVar(&s.AdminAuth, "admin-auth", "auto", "admin API access: auto (the local admin secret in the data dir, or an administrator's password), always (a password), never (anyone), or loopback (auto, and anyone connecting from loopback)")
	fs.BoolVar(&s.AdminPlaintext, "admin-plaintext", false, "accept admin credentials from beyond loopback without TLS (only on a network you trust)")
}

// check validates the settings without reading files.
func (s *clusterSecurity) check() error {
	set := 0
	for _, f := range []string{s.TLSCert, s.TLSKey, s.TLSCA} {
		if f != "" {
			set++
		}
	}
	if set != 0 && set != 3 {
		return errors.New("--cluster-tls-cert, --cluster-tls-key and --cluster-tls-ca go together")
	}
	if s.Secret != "" && s.SecretFile != "" {
		return errors.New("give the cluster secret once: --cluster-secret or --cluster-secret-file, not both")
	}
	if s.Secret != "" {
		if err := checkSecret([]byte(s.Secret), "--cluster-secret"); err != nil {
			return err
		}
	}
	if s.GossipKey != "" {
		if _, err := linksec.ParseGossipKeys(s.GossipKey); err != nil {
			return err
		}
	}
	_, err := grpcadmin.ParseAuthMode(s.AdminAuth)
	return err
}

// checkMultiNode refuses a node that is to form or join a cluster with no
// way to prove to the other nodes that it belongs: no secret, no TLS.
func (s *clusterSecurity) checkMultiNode(expect int, join []string) error {
	if (expect <= 1 && len(join) == 0) || s.Secret != "" || s.SecretFile != "" || s.TLSCert != "" {
		return nil
	}
	why := fmt.Sprintf("--bootstrap-expect %d", expect)
	if len(join) > 0 {
		why = "--join " + strings.Join(join, ",")
	}
	return fmt.Errorf("this node is to form or join a cluster (%s) but has no cluster secret: "+
		"set the same secret of at least %d bytes on every node with --cluster-secret or RAFTMQ_CLUSTER_SECRET "+
		"(generate one with: openssl rand -base64 32), or with --cluster-secret-file (RAFTMQ_CLUSTER_SECRET_FILE), "+
		"or give every node a certificate with --cluster-tls-cert, --cluster-tls-key and --cluster-tls-ca (docs/security.md)",
		why, linksec.MinSecretLen)
}

// checkSecret refuses a secret too short to be one, naming where it came
// from.
func checkSecret(secret []byte, from string) error {
	if len(secret) < linksec.MinSecretLen {
		return fmt.Errorf("%s: the cluster secret is %d bytes, it must be at least %d (generate one with: openssl rand -base64 32)",
			from, len(secret), linksec.MinSecretLen)
	}
	return nil
}

// generatedSecretFile is the file, in the data dir, where a lone node keeps
// the secret it generated.
const generatedSecretFile = "cluster-secret"

// derivedCAFile is the file, in the data dir, where a node with the cluster
// secret writes the PEM certificate of the CA derived from it, for
// raftmqctl --tls-ca (it holds no secret).
const derivedCAFile = "cluster-ca.pem"

// secret returns the cluster secret: given, read from its file, or, for a
// lone node (alone true) with neither, the one it generated in dataDir at
// its first start (nil when none applies). generated says the secret was
// made now.
func (s *clusterSecurity) secret(dataDir string, alone bool) (secret []byte, generated bool, err error) {
	switch {
	case s.Secret != "":
		return []byte(s.Secret), false, nil
	case s.SecretFile != "":
		b, err := os.ReadFile(s.SecretFile)
		if err != nil {
			return nil, false, fmt.Errorf("--cluster-secret-file: %w", err)
		}
		b = bytes.TrimSpace(b)
		return b, false, checkSecret(b, s.SecretFile)
	case !alone:
		return nil, false, nil
	}
	path := filepath.Join(dataDir, generatedSecretFile)
	b, err := os.ReadFile(path)
	if err == nil {
		b = bytes.TrimSpace(b)
		return b, false, checkSecret(b, path)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, fmt.Errorf("cluster secret: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, false, fmt.Errorf("cluster secret: %w", err)
	}
	b = []byte(base64.StdEncoding.EncodeToString(raw))
	if err := writeFileAtomic(path, append(slices.Clone(b), '\n'), 0o600); err != nil {
		return nil, false, fmt.Errorf("cluster secret: %w", err)
	}
	return b, true, nil
}

// writeFileAtomic writes data to path through a synced temporary file and a
// rename, so a crash leaves the old file or the whole new one.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// security is clusterSecurity loaded: what the node and its servers use.
type security struct {
	tls       *linksec.TLS // an operator's or the secret's; nil: none
	keys      [][]byte     // nil: plain gossip
	auth      *grpcadmin.Auth
	plaintext bool   // admin credentials accepted without TLS
	caFile    string // the derived CA's certificate, for raftmqctl ("": none)
	generated string // the secret file generated at this start ("": none)
	// adminSecret is the local admin secret's file when generated at this
	// start ("": none or not new).
	adminSecret string
}

// load reads the files and builds what the node uses. nodeID names the
// node's certificate when it comes from the secret; alone says the node
// neither forms nor joins a cluster (--bootstrap-expect 1, no --join), so
// it may generate its own secret in dataDir.
func (s *clusterSecurity) load(dataDir, nodeID string, alone bool) (*security, error) {
	out := &security{}
	// An operator's TLS needs no secret: none is generated for it.
	secret, generated, err := s.secret(dataDir, alone && s.TLSCert == "")
	if err != nil {
		return nil, err
	}
	switch {
	case s.TLSCert != "":
		if out.tls, err = linksec.LoadTLS(s.TLSCert, s.TLSKey, s.TLSCA); err != nil {
			return nil, err
		}
	case secret == nil:
		// parseConfig refuses this already; the check is repeated where
		// the links are built, so no path starts a node with open ones.
		return nil, errors.New("no cluster secret and no cluster TLS: set --cluster-secret or --cluster-tls-*")
	default:
		if out.tls, err = linksec.SecretTLS(secret, nodeID); err != nil {
			return nil, err
		}
		out.caFile = filepath.Join(dataDir, derivedCAFile)
		if err := writeFileAtomic(out.caFile, out.tls.CAPEM(), 0o644); err != nil {
			return nil, fmt.Errorf("write the derived CA certificate: %w", err)
		}
	}
	if generated {
		out.generated = filepath.Join(dataDir, generatedSecretFile)
	}
	switch {
	case s.GossipKey != "":
		if out.keys, err = linksec.ParseGossipKeys(s.GossipKey); err != nil {
			return nil, err
		}
	case secret != nil:
		k, err := linksec.SecretGossipKey(secret)
		if err != nil {
			return nil, err
		}
		out.keys = [][]byte{k}
	}
	mode, err := grpcadmin.ParseAuthMode(s.AdminAuth)
	if err != nil {
		return nil, err
	}
	out.auth = grpcadmin.NewAuth(mode, nil)
	if mode.TakesSecret() {
		local, created, err := grpcadmin.LocalSecret(dataDir)
		if err != nil {
			return nil, err
		}
		out.auth.SetLocalSecret(local)
		if created {
			out.adminSecret = filepath.Join(dataDir, client.SecretFileName)
		}
	}
	if s.AdminPlaintext {
		out.auth.AllowPlaintext()
		out.plaintext = true
	}
	return out, nil
}

// serverOptions are the gRPC server's options: the node's, its TLS, and the
// admin checks.
func (s *security) serverOptions() []grpc.ServerOption {
	return append(cluster.ServerOptions(s.tls),
		grpc.ChainUnaryInterceptor(s.auth.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(s.auth.StreamInterceptor()))
}

// peers dials other nodes' Admin services with the node's certificate.
func (s *security) peers() *ops.PeerPool {
	if s.tls == nil {
		return ops.NewPeerPool()
	}
	return ops.NewPeerPool(grpc.WithTransportCredentials(credentials.NewTLS(s.tls.ClientConfig())))
}

// warn logs how the links are secured and the settings that leave
// something open.
func (s *security) warn(logger *slog.Logger, grpcAddr net.Addr) {
	beyond := true
	if a, ok := grpcAddr.(*net.TCPAddr); ok && a.IP.IsLoopback() {
		beyond = false
	}
	if s.generated != "" {
		logger.Info("generated a cluster secret for this lone node; to add nodes, give them the same secret (--cluster-secret-file)", "file", s.generated)
	}
	if s.tls.FromSecret() {
		logger.Info("links between nodes use TLS from the cluster secret; raftmqctl reaches the admin API over TLS with --tls-ca", "ca", s.caFile)
	}
	if s.adminSecret != "" {
		logger.Info("generated the local admin secret: raftmqctl run by this user on this host reads it (--data-dir)", "file", s.adminSecret)
	}
	switch {
	case s.auth.Mode() == grpcadmin.AuthLoopback:
		logger.Warn("the admin API trusts every caller from loopback, whoever runs it: other users and containers sharing this host's loopback administer the node (--admin-auth loopback)", "grpc", grpcAddr.String())
	case s.auth.Mode() == grpcadmin.AuthNever && beyond:
		logger.Warn("the admin API asks for no credentials and listens beyond loopback (--admin-auth never)", "grpc", grpcAddr.String())
	case s.tls.FromSecret() && beyond && s.plaintext:
		logger.Warn("the admin API takes credentials without TLS from beyond loopback (--admin-plaintext): passwords of plain connections travel in clear", "grpc", grpcAddr.String())
	}
	if s.keys == nil {
		logger.Warn("gossip is not encrypted: anyone who reaches the gossip port joins the membership (set --gossip-key or --cluster-secret); raft and forwarding still need a node certificate")
	}
}
