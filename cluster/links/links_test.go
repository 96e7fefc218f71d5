package links

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// listen returns a listener on a free local port, closed by the test's
// end, that accepts and keeps its connections open.
func listen(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	return ln.Addr().String()
}

// Block closes the live connections to an address and refuses new dials
// until Heal.
func TestLinks_BlockClosesAndRefusesUntilHeal(t *testing.T) {
	addr := listen(t)
	l := New()
	c, err := l.Dial(context.Background(), addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	l.Block(addr)
	_ = c.SetReadDeadline(time.Now().Add(time.Minute)) // a failure, not a hang
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read of a blocked link's connection: %v, want it closed", err)
	}
	if _, err := l.Dial(context.Background(), addr, time.Second); !errors.Is(err, ErrDown) {
		t.Fatalf("dial of a blocked link: %v, want ErrDown", err)
	}
	l.Heal()
	c, err = l.Dial(context.Background(), addr, time.Second)
	if err != nil {
		t.Fatalf("dial after Heal: %v", err)
	}
	_ = c.Close()
}

// A frozen link's connection stays open and passes nothing: a write waits
// for its deadline.
func TestLinks_FrozenWriteWaitsForItsDeadline(t *testing.T) {
	addr := listen(t)
	l := New()
	c, err := l.Dial(context.Background(), addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l.Freeze(addr)
	if l.Allowed(addr) {
		t.Fatal("a frozen address is allowed")
	}
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
	if _, err := c.Write([]byte{1}); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write to a frozen link: %v, want a passed deadline", err)
	}
	l.Heal()
	_ = c.SetWriteDeadline(time.Time{})
	if _, err := c.Write([]byte{1}); err != nil {
		t.Fatalf("write after Heal: %v", err)
	}
}

// Abort ends the connections an Outbound dialled and fails later dials.
func TestOutbound_AbortClosesAndRefuses(t *testing.T) {
	addr := listen(t)
	var l *Links // lets everything through
	o := NewOutbound()
	c, err := o.Dial(context.Background(), addr, time.Second, l.Dial)
	if err != nil {
		t.Fatal(err)
	}
	o.Abort()
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection still reads after Abort")
	}
	if _, err := o.Dial(context.Background(), addr, time.Second, l.Dial); err == nil {
		t.Fatal("a dial after Abort succeeded")
	}
}
