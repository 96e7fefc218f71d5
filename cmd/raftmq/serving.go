package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"

	"github.com/raftmq/raftmq/amqp"
	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/fsm"
)

// reserveAddr checks at start that addr can be listened on, so a taken
// port stops the node at once with a clear message, although the AMQP
// listeners open only later (awaitServing). It returns the address to
// listen on then (port 0 resolved to the port the system picked) and the
// address the check bound.
func reserveAddr(addr string) (listen, bound string, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", "", err
	}
	bound = ln.Addr().String()
	if err := ln.Close(); err != nil {
		return "", "", err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", "", err
	}
	if port == "0" {
		_, port, _ = net.SplitHostPort(bound)
	}
	return net.JoinHostPort(host, port), bound, nil
}

// awaitServing returns once the node can authenticate an AMQP login: it is
// ready (a restarted node has released its previous run) and its applied
// state holds the cluster's defaults (the first leader's vhost, user and
// permissions). A listener opened earlier took connections that the
// handshake then refused with 403 for a correct password, because the
// user did not exist yet on this node.
func awaitServing(ctx context.Context, node *cluster.Node) error {
	select {
	case <-node.Ready():
	case <-ctx.Done():
		return ctx.Err()
	}
	for {
		applied := node.AppliedIndex()
		var ok bool
		node.View(func(m *fsm.Machine) { ok = m.Initialized() })
		if ok {
			return nil
		}
		// Any entry applied after the one read above wakes us.
		if err := node.WaitApplied(ctx, applied+1); err != nil {
			return err
		}
	}
}

// serveAMQP opens an AMQP listener on addr, over TLS when tc is set, and
// serves it until the server closes.
func serveAMQP(srv *amqp.Server, what, addr string, tc *tls.Config) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s listener: %w", what, err)
	}
	defer ln.Close() // Serve leaves it open when the server closed first
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	return srv.Serve(ln)
}
