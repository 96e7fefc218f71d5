package main

import (
	"fmt"
	"net"
	"os"
)

// advertiseHost picks the host other nodes reach this node at: --advertise
// when given, else the host of the Raft listen address when it names one,
// else the first address the host name resolves to (in a container, its
// address on the cluster network), else loopback.
func advertiseHost(flagValue, raftAddr string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	host, _, err := net.SplitHostPort(raftAddr)
	if err != nil {
		return "", fmt.Errorf("--raft-addr %q: %w", raftAddr, err)
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return host, nil
	}
	if name, err := os.Hostname(); err == nil {
		if addrs, err := net.LookupIP(name); err == nil {
			for _, a := range addrs {
				if v4 := a.To4(); v4 != nil && !v4.IsLoopback() {
					return v4.String(), nil
				}
			}
		}
	}
	return "127.0.0.1", nil
}

// advertise replaces an empty or unspecified host in addr with host.
func advertise(host, addr string) string {
	h, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
		return net.JoinHostPort(host, port)
	}
	return addr
}
