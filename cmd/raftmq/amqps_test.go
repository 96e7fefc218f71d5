package main

import (
	"crypto/tls"
	"io"
	"net"
	"os"
	"testing"

	"github.com/raftmq/raftmq/internal/testpki"
)

// writeCert writes a certificate for 127.0.0.1 with subject cn, signed by
// ca, as dir/server.pem and its key as dir/server.key, and ca as dir/ca.pem.
func writeCert(t *testing.T, ca *testpki.CA, dir, cn string) testpki.Files {
	t.Helper()
	return ca.WriteFiles(t, dir, "server", ca.Issue(t, testpki.Server|testpki.Client, cn, "127.0.0.1"))
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
	ca := testpki.New(t, "test CA")
	f := writeCert(t, ca, dir, "first")
	r, ln := reloadingListener(t, f)
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
	writeCert(t, ca, dir, "second")
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
	if err := os.WriteFile(f.Key, []byte("not a key"), 0o600); err != nil {
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
	f := writeCert(t, testpki.New(t, "test CA"), t.TempDir(), "n1")
	_, ln := reloadingListener(t, f)
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
	f := writeCert(t, testpki.New(t, "test CA"), t.TempDir(), "n1")
	for verify, want := range map[string]tls.ClientAuthType{
		"none":     tls.NoClientCert,
		"optional": tls.VerifyClientCertIfGiven,
		"required": tls.RequireAndVerifyClientCert,
	} {
		c, err := loadTLS(tlsConfig{Cert: f.Cert, Key: f.Key, CA: f.CA, Verify: verify})
		if err != nil {
			t.Fatal(err)
		}
		if c.ClientAuth != want || c.ClientCAs == nil || c.MinVersion != tls.VersionTLS12 {
			t.Errorf("verify %s: client auth %v, CAs %v", verify, c.ClientAuth, c.ClientCAs)
		}
	}
	if _, err := loadTLS(tlsConfig{Cert: f.Cert, Key: f.Key, CA: f.Key, Verify: "required"}); err == nil {
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

// reloadingListener is a certificate reloader for f's certificate and key
// (no client certificates) and a TLS listener on loopback that uses it.
func reloadingListener(t *testing.T, f testpki.Files) (*certReloader, net.Listener) {
	t.Helper()
	r, err := newCertReloader(tlsConfig{Cert: f.Cert, Key: f.Key, Verify: "none"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", r.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return r, ln
}
