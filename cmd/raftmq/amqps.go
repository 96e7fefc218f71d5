package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync/atomic"
)

// certReloader serves a TLS configuration that can be replaced while the
// listener runs: each new handshake takes the configuration current at
// that moment (GetConfigForClient), and connections already established
// keep the one they were made with. Reload reads the files again.
type certReloader struct {
	cfg tlsConfig
	cur atomic.Pointer[tls.Config]
}

// newCertReloader loads the certificate, key and CA once; an error here
// stops the node from starting.
func newCertReloader(cfg tlsConfig) (*certReloader, error) {
	r := &certReloader{cfg: cfg}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// Reload reads the files again and swaps the configuration in; on error
// the previous configuration stays in use.
func (r *certReloader) Reload() error {
	c, err := loadTLS(r.cfg)
	if err != nil {
		return err
	}
	r.cur.Store(c)
	return nil
}

// ServerConfig is the listener's configuration: it hands every client
// hello the current configuration.
func (r *certReloader) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.cur.Load(), nil
		},
	}
}

// Leaf is the current server certificate (for logs and tests).
func (r *certReloader) Leaf() *x509.Certificate {
	c := r.cur.Load()
	if c == nil || len(c.Certificates) == 0 {
		return nil
	}
	return c.Certificates[0].Leaf
}

func loadTLS(cfg tlsConfig) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(cfg.Cert, cfg.Key)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s and key %s: %w", cfg.Cert, cfg.Key, err)
	}
	c := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
	}
	switch cfg.Verify {
	case "optional":
		c.ClientAuth = tls.VerifyClientCertIfGiven
	case "required":
		c.ClientAuth = tls.RequireAndVerifyClientCert
	default:
		c.ClientAuth = tls.NoClientCert
	}
	if cfg.CA != "" {
		pem, err := os.ReadFile(cfg.CA)
		if err != nil {
			return nil, fmt.Errorf("TLS client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS client CA %s: no PEM certificate in it", cfg.CA)
		}
		c.ClientCAs = pool
	}
	return c, nil
}
