package amqp

import (
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/internal/testpki"
)

// startTLSServer serves AMQP over TLS with client certificates verified
// against ca when given.
func startTLSServer(t *testing.T, ca *testpki.CA, auth tls.ClientAuthType) (*testServer, string) {
	t.Helper()
	b := newFakeBroker()
	srv := NewServer(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), CloseTimeout: time.Second, HandshakeTimeout: 2 * time.Second})
	srv.SetBroker(b)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{ca.Issue(t, testpki.Server, "127.0.0.1", "127.0.0.1")},
		ClientCAs:    ca.Pool(),
		ClientAuth:   auth,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(tls.NewListener(ln, cfg)) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
	})
	addr := ln.Addr().String()
	return &testServer{srv: srv, broker: b, addr: addr, url: "amqp://guest:guest@" + addr + "/"}, "amqps://" + addr + "/"
}

func clientTLS(ca *testpki.CA, certs ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: ca.Pool(), Certificates: certs, MinVersion: tls.VersionTLS12}
}

func TestTLS_PlainAndExternal(t *testing.T) {
	ca := testpki.New(t, "raftmq test CA")
	ts, amqps := startTLSServer(t, ca, tls.VerifyClientCertIfGiven)

	// PLAIN over TLS without a client certificate: EXTERNAL is not offered.
	c, err := amqp091.DialTLS("amqps://guest:guest@"+ts.addr+"/", clientTLS(ca))
	if err != nil {
		t.Fatalf("PLAIN over TLS: %v", err)
	}
	_ = c.Close()
	_, err = amqp091.DialTLS_ExternalAuth(amqps, clientTLS(ca))
	if !errors.Is(err, amqp091.ErrSASL) {
		t.Fatalf("EXTERNAL without a certificate: %v, want no common mechanism", err)
	}

	// EXTERNAL with a certificate whose CN is an existing user.
	c, err = amqp091.DialTLS_ExternalAuth(amqps, clientTLS(ca, ca.Issue(t, testpki.Client, "alice")))
	if err != nil {
		t.Fatalf("EXTERNAL as alice: %v", err)
	}
	// The guest connection closed above leaves the list once its reader
	// has ended, which may come after the client saw close-ok.
	eventually(t, 5*time.Second, "alice's connection alone", func() bool {
		list := ts.srv.Connections().List()
		return len(list) == 1 && list[0].User == "alice"
	})
	_ = c.Close()

	// A certificate for a user that does not exist: 403, like a bad password.
	_, err = amqp091.DialTLS_ExternalAuth(amqps, clientTLS(ca, ca.Issue(t, testpki.Client, "mallory")))
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != replycode.AccessRefused {
		t.Fatalf("EXTERNAL as an unknown user: %v, want 403", err)
	}

	// A certificate from another CA is refused in the TLS handshake.
	other := testpki.New(t, "raftmq test CA")
	if _, err := amqp091.DialTLS_ExternalAuth(amqps, clientTLS(ca, other.Issue(t, testpki.Client, "alice"))); err == nil {
		t.Fatal("a certificate from an unknown CA was accepted")
	}
}

func TestTLS_PlainAMQPOnTheTLSPortFailsAndTheServerStaysUp(t *testing.T) {
	ca := testpki.New(t, "raftmq test CA")
	ts, _ := startTLSServer(t, ca, tls.NoClientCert)
	if c, err := amqp091.Dial(ts.url); err == nil {
		_ = c.Close()
		t.Fatal("plain AMQP on the TLS port connected")
	}
	// The server answered with no AMQP bytes and still serves TLS clients.
	nc, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_, _ = nc.Write(wire.ProtocolHeader)
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, _ := io.ReadAll(nc)
	if len(got) >= len(wire.ProtocolHeader) && string(got[:4]) == "AMQP" {
		t.Fatalf("the TLS port answered in plain AMQP: %q", got)
	}
	c, err := amqp091.DialTLS("amqps://guest:guest@"+ts.addr+"/", clientTLS(ca))
	if err != nil {
		t.Fatalf("TLS after a plain client: %v", err)
	}
	_ = c.Close()
	// EXTERNAL is never offered without client certificate verification.
	if _, err := amqp091.DialTLS_ExternalAuth("amqps://"+ts.addr+"/", clientTLS(ca, ca.Issue(t, testpki.Client, "alice"))); !errors.Is(err, amqp091.ErrSASL) {
		t.Fatalf("EXTERNAL with verification off: %v", err)
	}
}
