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
}
