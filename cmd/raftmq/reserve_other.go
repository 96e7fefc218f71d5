//go:build !unix

package main

import "net"

// bindOnly checks that addr can be listened on by listening and closing
// at once, where a socket that only binds is not at hand.
func bindOnly(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	bound := ln.Addr().String()
	return bound, ln.Close()
}
