package main

import (
	"errors"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/raftmq/raftmq/api/grpcadmin"
	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/internal/testpki"
	"github.com/raftmq/raftmq/proto"
)

// TestRun_TLSAndCredentials serves a single-node cluster's Admin service
// with cluster TLS and admin auth always (so loopback is not trusted) and
// drives raftmqctl's --tls-* and --username/--password flags against it.
func TestRun_TLSAndCredentials(t *testing.T) {
	ca := testpki.New(t, "test CA")
	c := clustertest.New(t, 1, clustertest.WithTLS(t, ca))
	node := ops.FromCluster(c.WaitForLeader(clustertest.Timeout))
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		ready := false
		node.View(func(s ops.State) { ready = s.Initialized() })
		if !ready {
			return errors.New("defaults not applied yet")
		}
		return nil
	})
	auth := grpcadmin.NewAuth(grpcadmin.AuthAlways, node)
	srv := grpc.NewServer(append(cluster.ServerOptions(c.Nodes[0].Config.TLS),
		grpc.ChainUnaryInterceptor(auth.UnaryInterceptor()))...)
	proto.RegisterAdminServer(srv, grpcadmin.New(ops.New(ops.Deps{Node: node})))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	addr := lis.Addr().String()

	op := ca.WriteFiles(t, t.TempDir(), "op", ca.Issue(t, testpki.Server|testpki.Client, "operator", "operator", "127.0.0.1"))
	tlsArgs := []string{"--tls-ca", op.CA, "--tls-cert", op.Cert, "--tls-key", op.Key}

	// The default user guest/guest is an administrator.
	code, out, errs := ctl(t, addr, append(tlsArgs, "--username", "guest", "--password", "guest", "list_vhosts")...)
	if code != exitOK || !strings.Contains(out, "/") {
		t.Fatalf("administrator over TLS: exit %d, out %q, err %q", code, out, errs)
	}
	code, _, errs = ctl(t, addr, append(tlsArgs, "list_vhosts")...)
	if code != exitFailed || !strings.Contains(errs, "Unauthenticated") {
		t.Fatalf("no credentials: exit %d, err %q", code, errs)
	}
	code, _, errs = ctl(t, addr, append(tlsArgs, "--username", "guest", "--password", "nope", "list_vhosts")...)
	if code != exitFailed || !strings.Contains(errs, "Unauthenticated") {
		t.Fatalf("wrong password: exit %d, err %q", code, errs)
	}
	// Without a client certificate the TLS handshake fails.
	code, _, errs = ctl(t, addr, "--tls-ca", tlsArgs[1], "--username", "guest", "--password", "guest", "list_vhosts")
	if code == exitOK {
		t.Fatalf("no client certificate: exit %d, err %q", code, errs)
	}
	// Without TLS at all neither.
	code, _, errs = ctl(t, addr, "--username", "guest", "--password", "guest", "list_vhosts")
	if code == exitOK {
		t.Fatalf("plain connection to a TLS port: exit %d, err %q", code, errs)
	}
	// Half a key pair is a usage mistake caught when dialling.
	code, _, _ = ctl(t, addr, "--tls-ca", tlsArgs[1], "--tls-cert", tlsArgs[3], "list_vhosts")
	if code != exitUnavailable {
		t.Fatalf("certificate without key: exit %d", code)
	}
}
