package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/raftmq/raftmq/api/grpcadmin"
	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/internal/testpki"
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
	addr := serveAdmin(t, ops.New(ops.Deps{Node: node}), append(cluster.ServerOptions(c.Nodes[0].Config.TLS),
		grpc.ChainUnaryInterceptor(auth.UnaryInterceptor()))...)

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

// TestRun_LocalSecret serves a single-node cluster's Admin service with the
// default admin auth (auto) on loopback: raftmqctl gets in with the admin
// secret of the node's data dir, and without it, or with another node's,
// it is refused like a remote caller without credentials, loopback or not.
func TestRun_LocalSecret(t *testing.T) {
	addr, dataDir := serveLocalAdmin(t)
	code, _, errs := ctl(t, addr, "--data-dir", dataDir, "add_user", "ops", "pw")
	if code != exitOK {
		t.Fatalf("with the data dir's secret: exit %d, err %q", code, errs)
	}
	wrong := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrong, []byte(strings.Repeat("0", 64)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty, other := t.TempDir(), t.TempDir()
	if _, _, err := grpcadmin.LocalSecret(other); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		hint string
	}{
		{"no secret in the data dir", []string{"--data-dir", empty}, "no admin secret at " + filepath.Join(empty, "admin-secret")},
		{"no data dir", []string{"--data-dir", ""}, ""},
		{"a wrong secret file", []string{"--secret-file", wrong}, ""},
		{"another node's data dir", []string{"--data-dir", other}, "wrong admin secret"},
	} {
		code, _, errs := ctl(t, addr, append(tc.args, "add_user", "mallory", "pw")...)
		if code != exitFailed || !strings.Contains(errs, "Unauthenticated") || !strings.Contains(errs, tc.hint) {
			t.Errorf("%s: exit %d, err %q", tc.name, code, errs)
		}
	}
	// An administrator's password still works without the secret.
	code, _, errs = ctl(t, addr, "--data-dir", empty, "--username", "guest", "--password", "guest", "list_users")
	if code != exitOK {
		t.Fatalf("administrator without the secret: exit %d, err %q", code, errs)
	}
	code, out, errs := ctl(t, addr, "--data-dir", dataDir, "list_users")
	if code != exitOK || strings.Contains(out, "mallory") || !strings.Contains(out, "ops") {
		t.Fatalf("users: exit %d, out %q, err %q", code, out, errs)
	}
	// A --secret-file that cannot be read is a mistake in the command.
	code, _, errs = ctl(t, addr, "--secret-file", filepath.Join(empty, "none"), "list_users")
	if code != exitUsage || !strings.Contains(errs, "--secret-file") {
		t.Fatalf("missing --secret-file: exit %d, err %q", code, errs)
	}
}

// serveLocalAdmin serves a single-node cluster's Admin service on loopback
// with the default admin auth (auto) and returns its address and the data
// dir holding its admin secret, once the node's default user is applied.
func serveLocalAdmin(t *testing.T) (addr, dataDir string) {
	t.Helper()
	node := readyNode(t)
	dataDir = t.TempDir()
	secret, _, err := grpcadmin.LocalSecret(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	auth := grpcadmin.NewAuth(grpcadmin.AuthAuto, node).SetLocalSecret(secret)
	return serveAdmin(t, ops.New(ops.Deps{Node: node}), grpc.ChainUnaryInterceptor(auth.UnaryInterceptor())), dataDir
}

func TestLoopbackNode(t *testing.T) {
	for addr, want := range map[string]bool{
		"localhost:5680": true, "127.0.0.1:5680": true, "127.1.2.3:1": true, "[::1]:5680": true,
		"10.0.0.1:5680": false, "raftmq-0.raftmq:5680": false, "localhost": false,
	} {
		if got := loopbackNode(addr); got != want {
			t.Errorf("%s: %v, want %v", addr, got, want)
		}
	}
}
