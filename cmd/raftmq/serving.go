package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/fsm"
)

// reserveAddr checks at start that addr can be listened on, so a taken
// port stops the node at once with a clear message, although the AMQP
// listeners open only later (awaitServing). It returns the address to
// listen on then (port 0 resolved to the port the system picked) and the
// address the check bound. The check binds without listening: nothing
// takes a connection before the listener does.
func reserveAddr(addr string) (listen, bound string, err error) {
	bound, err = bindOnly(addr)
	if err != nil {
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

// openAMQP opens the AMQP listener and, when an AMQPS address is given,
// the AMQPS one.
func openAMQP(addr, tlsAddr string, certs *certReloader) ([]net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("AMQP listener: %w", err)
	}
	lns := []net.Listener{ln}
	if tlsAddr != "" {
		tln, err := net.Listen("tcp", tlsAddr)
		if err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("AMQPS listener: %w", err)
		}
		lns = append(lns, tls.NewListener(tln, certs.ServerConfig()))
	}
	return lns, nil
}
