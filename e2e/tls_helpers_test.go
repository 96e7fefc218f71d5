package e2e

import (
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/raftmq/raftmq/internal/testpki"
)

// writeServerFiles writes a fresh server certificate for 127.0.0.1 from
// ca, its key and ca into dir (replacing what is there) and returns the
// files and the certificate.
func writeServerFiles(t *testing.T, ca *testpki.CA, dir string) (testpki.Files, tls.Certificate) {
	t.Helper()
	c := ca.Issue(t, testpki.Server, "127.0.0.1", "127.0.0.1")
	return ca.WriteFiles(t, dir, "server", c), c
}

// amqpsArgs are the node flags that serve AMQPS on addr with the files f.
func amqpsArgs(f testpki.Files, addr string) []string {
	return []string{"--amqps-addr", addr, "--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA, "--tls-verify", "optional"}
}

// clientTLS trusts ca and presents certs.
func clientTLS(ca *testpki.CA, certs ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: ca.Pool(), Certificates: certs, MinVersion: tls.VersionTLS12}
}

// clusterFiles writes a certificate from ca for client and server use
// naming name (Common Name and DNS name, and valid for loopback).
func clusterFiles(t *testing.T, ca *testpki.CA, name string) testpki.Files {
	t.Helper()
	return ca.WriteFiles(t, t.TempDir(), name, ca.Issue(t, testpki.Server|testpki.Client, name, name, "127.0.0.1"))
}

// nodeTLSArgs are the raftmq flags that give a node a certificate from ca
// naming id.
func nodeTLSArgs(t *testing.T, ca *testpki.CA, id string) []string {
	t.Helper()
	f := clusterFiles(t, ca, id)
	return []string{"--cluster-tls-cert", f.Cert, "--cluster-tls-key", f.Key, "--cluster-tls-ca", f.CA}
}

// ctlTLSArgs are the raftmqctl flags of an operator's client certificate
// from ca.
func ctlTLSArgs(t *testing.T, ca *testpki.CA) []string {
	t.Helper()
	f := clusterFiles(t, ca, "e2e-operator")
	return []string{"--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key}
}

// hup sends SIGHUP to a node's process.
func (n *Node) hup(t *testing.T) {
	t.Helper()
	if !n.Running() {
		t.Fatalf("%s is not running", n.ID)
	}
	if err := n.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
}

// AMQP 0-9-1 frames for a client that writes and never reads: encoded by
// hand so that nothing in the test reads the socket behind its back.

func shortstr(b []byte, s string) []byte { return append(append(b, byte(len(s))), s...) }

func longstr(b []byte, s string) []byte {
	return append(binary.BigEndian.AppendUint32(b, uint32(len(s))), s...)
}

func frame(b []byte, typ byte, channel uint16, payload []byte) []byte {
	b = append(b, typ)
	b = binary.BigEndian.AppendUint16(b, channel)
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	return append(append(b, payload...), 0xCE)
}

func method(class, id uint16, args ...byte) []byte {
	p := binary.BigEndian.AppendUint16(nil, class)
	p = binary.BigEndian.AppendUint16(p, id)
	return append(p, args...)
}

// blockedCapableOpen is a client's side of the handshake as guest, with
// client properties announcing the connection.blocked capability.
func blockedCapableOpen() []byte {
	b := []byte("AMQP\x00\x00\x09\x01")
	inner := append(shortstr(nil, "connection.blocked"), 't', 1)
	props := append(shortstr(nil, "capabilities"), 'F')
	props = append(binary.BigEndian.AppendUint32(props, uint32(len(inner))), inner...)
	a := append(binary.BigEndian.AppendUint32(nil, uint32(len(props))), props...)
	a = shortstr(a, "PLAIN")
	a = longstr(a, "\x00guest\x00guest")
	a = shortstr(a, "en_US")
	b = frame(b, 1, 0, method(10, 11, a...))
	a = binary.BigEndian.AppendUint16(nil, 0)
	a = binary.BigEndian.AppendUint32(a, 0)
	a = binary.BigEndian.AppendUint16(a, 0)
	b = frame(b, 1, 0, method(10, 31, a...))
	return frame(b, 1, 0, method(10, 40, append(shortstr(shortstr(nil, "/"), ""), 0)...))
}

// readMethod reads frames until a method frame and returns its class and
// method ids.
func readMethod(nc net.Conn) (class, id uint16, err error) {
	for {
		var hdr [7]byte
		if _, err := io.ReadFull(nc, hdr[:]); err != nil {
			return 0, 0, err
		}
		payload := make([]byte, int(binary.BigEndian.Uint32(hdr[3:]))+1)
		if _, err := io.ReadFull(nc, payload); err != nil {
			return 0, 0, err
		}
		if hdr[0] == 1 && len(payload) >= 5 {
			return binary.BigEndian.Uint16(payload), binary.BigEndian.Uint16(payload[2:]), nil
		}
	}
}

// deafClientPreamble opens a connection as guest, channel 1, declares the
// exclusive queue q and consumes it with no-ack, all without waiting for
// an answer (nowait), so the client never has to read.
func deafClientPreamble(q string) []byte {
	b := []byte("AMQP\x00\x00\x09\x01")
	var a []byte
	a = binary.BigEndian.AppendUint32(a, 0) // client-properties: empty table
	a = shortstr(a, "PLAIN")
	a = longstr(a, "\x00guest\x00guest")
	a = shortstr(a, "en_US")
	b = frame(b, 1, 0, method(10, 11, a...))
	a = binary.BigEndian.AppendUint16(nil, 0)                                          // channel-max: the server's
	a = binary.BigEndian.AppendUint32(a, 0)                                            // frame-max: the server's
	a = binary.BigEndian.AppendUint16(a, 0)                                            // no heartbeats
	b = frame(b, 1, 0, method(10, 31, a...))                                           // tune-ok
	b = frame(b, 1, 0, method(10, 40, append(shortstr(shortstr(nil, "/"), ""), 0)...)) // open
	b = frame(b, 1, 1, method(20, 10, 0))                                              // channel.open
	a = binary.BigEndian.AppendUint16(nil, 0)
	a = shortstr(a, q)
	a = append(a, 4|16)                      // exclusive, nowait
	a = binary.BigEndian.AppendUint32(a, 0)  // no arguments
	b = frame(b, 1, 1, method(50, 10, a...)) // queue.declare
	a = binary.BigEndian.AppendUint16(nil, 0)
	a = shortstr(a, q)
	a = shortstr(a, "deaf")
	a = append(a, 2|8) // no-ack, nowait
	a = binary.BigEndian.AppendUint32(a, 0)
	return frame(b, 1, 1, method(60, 20, a...)) // basic.consume
}

// deafPublish is basic.publish of body to the default exchange with
// routing key q, with its header and body frames.
func deafPublish(q string, body []byte) []byte {
	a := binary.BigEndian.AppendUint16(nil, 0)
	a = shortstr(a, "")
	a = shortstr(a, q)
	a = append(a, 0)
	b := frame(nil, 1, 1, method(60, 40, a...))
	h := binary.BigEndian.AppendUint16(nil, 60)
	h = binary.BigEndian.AppendUint16(h, 0)
	h = binary.BigEndian.AppendUint64(h, uint64(len(body)))
	h = binary.BigEndian.AppendUint16(h, 0) // no properties
	b = frame(b, 2, 1, h)
	return frame(b, 3, 1, body)
}

// dialDeaf connects with a small receive buffer (set before the connect,
// so the window the server sees is small).
func dialDeaf(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return nc
}
