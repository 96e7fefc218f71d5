package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writeCert writes a self-signed certificate for 127.0.0.1 with subject
// cn and its key as PEM files in dir; it returns their paths.
func writeCert(t *testing.T, dir, cn string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// handshakeSubject connects to addr over TLS and returns the subject CN
// of the server's certificate.
func handshakeSubject(t *testing.T, addr string) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("TLS dial: %v", err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName
}

func TestCertReloader_NewHandshakesGetTheReloadedCertificate(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := writeCert(t, dir, "first")
	r, err := newCertReloader(tlsConfig{Cert: certFile, Key: keyFile, Verify: "none"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", r.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_ = c.(*tls.Conn).Handshake()
				_, _ = io.Copy(io.Discard, c)
				c.Close()
			}()
		}
	}()
	// A connection made before the reload stays up across it.
	old, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if got := handshakeSubject(t, ln.Addr().String()); got != "first" {
		t.Fatalf("subject %q, want first", got)
	}
	writeCert(t, dir, "second")
	if got := handshakeSubject(t, ln.Addr().String()); got != "first" {
		t.Fatalf("subject %q before the reload, want first", got)
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := handshakeSubject(t, ln.Addr().String()); got != "second" {
		t.Fatalf("subject %q after the reload, want second", got)
	}
	if _, err := old.Write([]byte("still open")); err != nil {
		t.Fatalf("connection made before the reload: %v", err)
	}
	// A broken file keeps the previous certificate.
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err == nil {
		t.Fatal("reload of a broken key succeeded")
	}
	if got := handshakeSubject(t, ln.Addr().String()); got != "second" {
		t.Fatalf("subject %q after a failed reload, want second", got)
	}
}

func TestCertReloader_TLS12Minimum(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := writeCert(t, dir, "n1")
	r, err := newCertReloader(tlsConfig{Cert: certFile, Key: keyFile, Verify: "none"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", r.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11})
	if err == nil {
		c.Close()
		t.Fatal("a TLS 1.1 handshake succeeded")
	}
}

func TestCertReloader_VerifyModesAndCA(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := writeCert(t, dir, "ca")
	for verify, want := range map[string]tls.ClientAuthType{
		"none":     tls.NoClientCert,
		"optional": tls.VerifyClientCertIfGiven,
		"required": tls.RequireAndVerifyClientCert,
	} {
		c, err := loadTLS(tlsConfig{Cert: certFile, Key: keyFile, CA: certFile, Verify: verify})
		if err != nil {
			t.Fatal(err)
		}
		if c.ClientAuth != want || c.ClientCAs == nil || c.MinVersion != tls.VersionTLS12 {
			t.Errorf("verify %s: client auth %v, CAs %v", verify, c.ClientAuth, c.ClientCAs)
		}
	}
	if _, err := loadTLS(tlsConfig{Cert: certFile, Key: keyFile, CA: keyFile, Verify: "required"}); err == nil {
		t.Error("a CA file without certificates was accepted")
	}
}

func TestMemTotal(t *testing.T) {
	if got := memTotal([]byte("MemTotal:       16303492 kB\nMemFree:  1 kB\n")); got != 16303492<<10 {
		t.Fatalf("memTotal = %d", got)
	}
	if got := memTotal([]byte("nothing")); got != 0 {
		t.Fatalf("memTotal of nothing = %d", got)
	}
	if w := defaultMemoryWatermark(); w <= 0 {
		t.Fatalf("default watermark %d", w)
	}
}
