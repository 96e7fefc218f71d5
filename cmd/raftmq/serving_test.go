package main

import (
	"net"
	"testing"
)

func TestReserveAddr_TakenPortFailsAndPortZeroResolves(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	if _, _, err := reserveAddr(taken.Addr().String()); err == nil {
		t.Fatal("a taken port was reserved")
	}
	listen, bound, err := reserveAddr("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if listen != bound {
		t.Fatalf("listen on %s, bound %s", listen, bound)
	}
	if _, port, _ := net.SplitHostPort(listen); port == "0" {
		t.Fatalf("port 0 not resolved: %s", listen)
	}
	// The check leaves the port free for the listener opened later.
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatalf("the reserved address cannot be listened on: %v", err)
	}
	ln.Close()
	// An unspecified host stays unspecified (every interface).
	listen, _, err = reserveAddr(":0")
	if err != nil {
		t.Fatal(err)
	}
	if host, _, _ := net.SplitHostPort(listen); host != "" {
		t.Fatalf("host %q, want the configured empty host", host)
	}
	// A port taken on every interface is taken on loopback, and a name
	// resolves as the listener would resolve it.
	all, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	_, port, _ := net.SplitHostPort(all.Addr().String())
	if _, _, err := reserveAddr("127.0.0.1:" + port); err == nil {
		t.Fatal("a port taken on every interface was reserved on 127.0.0.1")
	}
	if _, _, err := reserveAddr("localhost:" + port); err == nil {
		t.Fatal("a port taken on every interface was reserved on localhost")
	}
	if _, _, err := reserveAddr("localhost:0"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := reserveAddr("127.0.0.1:99999"); err == nil {
		t.Fatal("port 99999 was reserved")
	}
	if v6, err := net.Listen("tcp", "[::1]:0"); err == nil {
		defer v6.Close()
		if _, _, err := reserveAddr(v6.Addr().String()); err == nil {
			t.Fatal("a taken IPv6 port was reserved")
		}
		if _, _, err := reserveAddr("[::1]:0"); err != nil {
			t.Fatal(err)
		}
	}
}

// The start-up check of the AMQP port takes no connection: a client that
// dials while the node checks its port is refused and dials again, where
// a listener opened for the check took it and reset it on closing.
func TestReserveAddr_TakesNoConnection(t *testing.T) {
	addr, _, err := reserveAddr("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	taken := make(chan int)
	go func() {
		n := 0
		defer func() { taken <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if c, err := net.Dial("tcp", addr); err == nil {
				n++
				c.Close()
			}
		}
	}()
	for range 2000 {
		if _, _, err := reserveAddr(addr); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if n := <-taken; n > 0 {
		t.Fatalf("%d connections were taken while the port was only checked", n)
	}
}
