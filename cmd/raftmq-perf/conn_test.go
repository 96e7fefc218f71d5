package main

import (
	"bytes"
	"errors"
	"net"
	"testing"
	"time"
)

// gateConn records each Write and blocks it until the test lets it go.
type gateConn struct {
	net.Conn
	writes chan []byte
	gate   chan error
}

func (g *gateConn) Write(p []byte) (int, error) {
	g.writes <- append([]byte(nil), p...)
	if err := <-g.gate; err != nil {
		return 0, err
	}
	return len(p), nil
}

func (g *gateConn) Close() error { return nil }

func newGate() *gateConn { return &gateConn{writes: make(chan []byte, 16), gate: make(chan error)} }

// What is written while a send is in progress leaves in one later send, in
// order, and Close sends what is pending.
func TestBatchingConn_CoalescesWhileSending(t *testing.T) {
	g := newGate()
	b := newBatchingConn(g)
	if _, err := b.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if got := <-g.writes; string(got) != "a" {
		t.Fatalf("first send %q", got)
	}
	// The first send is blocked: these queue behind it.
	for _, s := range []string{"b", "c", "d"} {
		if _, err := b.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	g.gate <- nil
	if got := <-g.writes; string(got) != "bcd" {
		t.Fatalf("second send %q, want the three writes made during the first", got)
	}
	g.gate <- nil
	if _, err := b.Write([]byte("e")); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error)
	go func() { closed <- b.Close() }()
	if got := <-g.writes; string(got) != "e" {
		t.Fatalf("pending at Close: %q", got)
	}
	g.gate <- nil
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write([]byte("f")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
}

// A failed send fails the writes after it, and a writer waiting for room
// is released by the failure.
func TestBatchingConn_SendErrorReachesWriters(t *testing.T) {
	g := newGate()
	b := newBatchingConn(g)
	if _, err := b.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	<-g.writes
	big := make([]byte, maxPending)
	if _, err := b.Write(big); err != nil { // fills pending
		t.Fatal(err)
	}
	blocked := make(chan error)
	go func() { _, err := b.Write([]byte("x")); blocked <- err }()
	boom := errors.New("boom")
	g.gate <- boom
	select {
	case err := <-blocked:
		if !errors.Is(err, boom) {
			t.Fatalf("waiting writer got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a writer waiting for room was not released by the failed send")
	}
	if _, err := b.Write([]byte("y")); !errors.Is(err, boom) {
		t.Fatalf("write after the failure: %v", err)
	}
	_ = b.Close()
}

// Over a real socket, many writes arrive whole and in order.
func TestBatchingConn_OverTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var want bytes.Buffer
	for i := 0; i < 20000; i++ {
		want.WriteString("frame-")
		want.WriteByte(byte('0' + i%10))
	}
	got := make(chan []byte)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(c)
		got <- buf.Bytes()
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := newBatchingConn(c)
	data := want.Bytes()
	for i := 0; i < len(data); i += 7 {
		if _, err := b.Write(data[i:min(i+7, len(data))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if r := <-got; !bytes.Equal(r, data) {
		t.Fatalf("received %d bytes, want %d in order", len(r), len(data))
	}
}
