//go:build unix

package main

import (
	"errors"
	"net"
	"strconv"
	"syscall"
)

// bindOnly binds a TCP socket to addr and closes it without listening, and
// returns the address it bound. A socket that only binds takes no
// connection: a client dialling the port meanwhile is refused and tries
// again, where a listener opened and closed for the check would have
// taken its connection into the backlog and then reset it.
func bindOnly(addr string) (string, error) {
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return "", err
	}
	if ip4 := ta.IP.To4(); ip4 != nil {
		return bindFamily(syscall.AF_INET, &syscall.SockaddrInet4{Port: ta.Port, Addr: [4]byte(ip4)})
	}
	if ta.IP != nil {
		return bindFamily(syscall.AF_INET6, &syscall.SockaddrInet6{Port: ta.Port, Addr: [16]byte(ta.IP.To16())})
	}
	// No host: every interface, as net.Listen binds it (IPv6 and IPv4
	// where the system has IPv6).
	bound, err := bindFamily(syscall.AF_INET6, &syscall.SockaddrInet6{Port: ta.Port})
	if errors.Is(err, syscall.EAFNOSUPPORT) {
		return bindFamily(syscall.AF_INET, &syscall.SockaddrInet4{Port: ta.Port})
	}
	return bound, err
}

func bindFamily(family int, sa syscall.Sockaddr) (string, error) {
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM, syscall.IPPROTO_TCP)
	if err != nil {
		return "", err
	}
	syscall.CloseOnExec(fd)
	defer syscall.Close(fd)
	// As net.Listen sets them: a port whose last connections linger in
	// TIME_WAIT is free, and an IPv6 socket with no host takes IPv4 too.
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		return "", err
	}
	if family == syscall.AF_INET6 {
		if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_IPV6, syscall.IPV6_V6ONLY, 0); err != nil {
			return "", err
		}
	}
	if err := syscall.Bind(fd, sa); err != nil {
		return "", &net.OpError{Op: "listen", Net: "tcp", Err: err}
	}
	got, err := syscall.Getsockname(fd)
	if err != nil {
		return "", err
	}
	var ip net.IP
	var port int
	switch a := got.(type) {
	case *syscall.SockaddrInet4:
		ip, port = a.Addr[:], a.Port
	case *syscall.SockaddrInet6:
		ip, port = a.Addr[:], a.Port
	default:
		return "", errors.New("bound an address of an unknown family")
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(port)), nil
}
