package main

import (
	"errors"
	"flag"
	"log/slog"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/raftmq/raftmq/api"
	"github.com/raftmq/raftmq/cluster"
)

// clusterSecurity are the settings that protect the links between nodes and
// the admin API (see docs/security.md).
type clusterSecurity struct {
	TLSCert   string
	TLSKey    string
	TLSCA     string
	GossipKey string
	AdminAuth string
	// AdminPlaintext lets admin credentials from beyond loopback arrive
	// without TLS.
	AdminPlaintext bool
}

func (s *clusterSecurity) flags(fs *flag.FlagSet) {
	fs.StringVar(&s.TLSCert, "cluster-tls-cert", "", "PEM certificate of this node for mutual TLS between nodes and on the gRPC port (names the node id)")
	fs.StringVar(&s.TLSKey, "cluster-tls-key", "", "PEM private key of --cluster-tls-cert")
	fs.StringVar(&s.TLSCA, "cluster-tls-ca", "", "PEM certificate of the cluster CA that signs node and admin client certificates")
	fs.StringVar(&s.GossipKey, "gossip-key", "", "base64 key of 16, 24 or 32 bytes encrypting gossip (comma-separated: the first encrypts, all decrypt)")
	fs.StringVar(&s.AdminAuth, "admin-auth", "auto", "admin API credentials: auto (required beyond loopback), always or never")
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
	if s.GossipKey != "" {
		if _, err := cluster.ParseGossipKeys(s.GossipKey); err != nil {
			return err
		}
	}
	_, err := api.ParseAuthMode(s.AdminAuth)
	return err
}

// security is clusterSecurity loaded: what the node and its servers use.
type security struct {
	tls       *cluster.TLS // nil: no TLS
	keys      [][]byte     // nil: plain gossip
	auth      *api.Auth
	plaintext bool // admin credentials accepted without TLS
}

func (s *clusterSecurity) load() (*security, error) {
	out := &security{}
	var err error
	if s.TLSCert != "" {
		if out.tls, err = cluster.LoadTLS(s.TLSCert, s.TLSKey, s.TLSCA); err != nil {
			return nil, err
		}
	}
	if s.GossipKey != "" {
		if out.keys, err = cluster.ParseGossipKeys(s.GossipKey); err != nil {
			return nil, err
		}
	}
	mode, err := api.ParseAuthMode(s.AdminAuth)
	if err != nil {
		return nil, err
	}
	out.auth = api.NewAuth(mode, nil)
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
func (s *security) peers() *api.PeerPool {
	if s.tls == nil {
		return api.NewPeerPool()
	}
	return api.NewPeerPool(grpc.WithTransportCredentials(credentials.NewTLS(s.tls.ClientConfig())))
}

// warn logs the settings that leave something open.
func (s *security) warn(logger *slog.Logger, grpcAddr net.Addr) {
	beyond := true
	if a, ok := grpcAddr.(*net.TCPAddr); ok && a.IP.IsLoopback() {
		beyond = false
	}
	switch {
	case s.auth.Mode() == api.AuthNever && beyond:
		logger.Warn("the admin API asks for no credentials and listens beyond loopback (--admin-auth never)", "grpc", grpcAddr.String())
	case s.tls == nil && beyond && s.plaintext:
		logger.Warn("the gRPC port has no TLS: admin passwords and forwarded messages travel in clear (set --cluster-tls-*)", "grpc", grpcAddr.String())
	case s.tls == nil && beyond:
		logger.Warn("the gRPC port has no TLS: forwarded messages travel in clear, and the admin API takes no credentials from beyond loopback (set --cluster-tls-*, or --admin-plaintext)", "grpc", grpcAddr.String())
	}
	if s.keys == nil {
		logger.Info("gossip is not encrypted (no --gossip-key)")
	}
}
