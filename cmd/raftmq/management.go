package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/raftmq/raftmq/api/mgmt"
	"github.com/raftmq/raftmq/api/ops"
)

// managementConfig configures RabbitMQ's management HTTP API.
type managementConfig struct {
	Addr            string // "" disables the API
	LoadDefinitions string // definitions file imported once the node is ready
	// TLSCert and TLSKey make the listener serve HTTPS (RabbitMQ's
	// management.ssl.certfile and keyfile).
	TLSCert, TLSKey string
}

func (m *managementConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&m.Addr, "management-addr", ":15672", "listen address of RabbitMQ's management HTTP API (rabbitmqadmin, definitions); empty disables it")
	fs.StringVar(&m.TLSCert, "management-tls-cert", "", "PEM certificate (chain) file: the management API serves HTTPS")
	fs.StringVar(&m.TLSKey, "management-tls-key", "", "PEM private key file of --management-tls-cert")
	fs.StringVar(&m.LoadDefinitions, "load-definitions", "", "definitions file in RabbitMQ's JSON format, imported through the log once the node is ready (idempotent: every node given it may import it)")
}

// management is the running management API of a node.
type management struct {
	ln   net.Listener
	srv  *http.Server
	api  *mgmt.Server
	defs []byte
}

// listenManagement opens the management listener and reads the
// definitions file, so that a taken port or a missing file fails the start
// at once; it returns nil when the API is disabled.
func listenManagement(cfg managementConfig) (*management, error) {
	m := &management{}
	if cfg.LoadDefinitions != "" {
		b, err := os.ReadFile(cfg.LoadDefinitions)
		if err != nil {
			return nil, fmt.Errorf("--load-definitions: %w", err)
		}
		m.defs = b
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return nil, errors.New("--management-tls-cert and --management-tls-key go together")
	}
	if cfg.Addr == "" {
		return m, nil
	}
	var tlsConfig *tls.Config
	if cfg.TLSCert != "" {
		pair, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("management TLS: %w", err)
		}
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("management listener: %w", err)
	}
	if tlsConfig != nil {
		ln = tls.NewListener(ln, tlsConfig)
	}
	m.ln = ln
	return m, nil
}

// addr is the listener's address, "" when disabled.
func (m *management) addr() string {
	if m.ln == nil {
		return ""
	}
	return m.ln.Addr().String()
}

// serve serves the API over admin (when enabled) and, once ready fires,
// imports the definitions file (when given).
func (m *management) serve(ctx context.Context, operations *ops.Service, ready <-chan struct{}, logger *slog.Logger, errc chan<- error) {
	m.api = mgmt.New(mgmt.Options{Ops: operations, Addr: m.addr(), Logger: logger})
	if m.ln != nil {
		m.srv = &http.Server{Handler: m.api, ReadHeaderTimeout: 5 * time.Second}
		go func() { errc <- m.srv.Serve(m.ln) }()
		go m.api.Run(ctx)
	}
	if m.defs == nil {
		return
	}
	go func() {
		select {
		case <-ready:
		case <-ctx.Done():
			return
		}
		ictx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		if err := m.api.LoadDefinitions(ictx, m.defs, logger); err != nil && !errors.Is(err, context.Canceled) {
			logger.Error("--load-definitions failed", "err", err)
		}
	}()
}

// shutdown stops the HTTP server.
func (m *management) shutdown(ctx context.Context) {
	if m.srv != nil {
		_ = m.srv.Shutdown(ctx)
	}
}
