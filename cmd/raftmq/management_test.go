package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/internal/testpki"
)

// TestManagementTLSAndLoadDefinitions serves the management API over
// HTTPS with --management-tls-* and imports --load-definitions once the
// node says it is ready.
func TestManagementTLSAndLoadDefinitions(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.New(t, "test CA")
	f := ca.WriteFiles(t, dir, "mgmt", ca.Issue(t, testpki.Server, "mgmt", "127.0.0.1"))
	defs, err := os.ReadFile(filepath.Join("..", "..", "api", "mgmt", "testdata", "rabbitmq-3.10.8", "definitions.json"))
	if err != nil {
		t.Fatal(err)
	}
	defsFile := filepath.Join(dir, "defs.json")
	if err := os.WriteFile(defsFile, defs, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := listenManagement(managementConfig{Addr: "127.0.0.1:0", TLSCert: f.Cert}); err == nil {
		t.Fatal("a certificate without its key was taken")
	}
	if _, err := listenManagement(managementConfig{Addr: "127.0.0.1:0", LoadDefinitions: filepath.Join(dir, "missing.json")}); err == nil {
		t.Fatal("a missing definitions file was taken")
	}
	m, err := listenManagement(managementConfig{Addr: "127.0.0.1:0", TLSCert: f.Cert, TLSKey: f.Key, LoadDefinitions: defsFile})
	if err != nil {
		t.Fatal(err)
	}

	c := clustertest.New(t, 1)
	n := c.WaitForLeader(clustertest.Timeout)
	admin := ops.New(ops.Deps{Node: ops.FromCluster(n)})
	t.Cleanup(func() { _ = admin.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	errc := make(chan error, 1)
	m.serve(ctx, admin, n.Ready(), slog.New(slog.NewTextHandler(io.Discard, nil)), errc)
	t.Cleanup(func() { m.shutdown(context.Background()) })

	clustertest.Eventually(t, clustertest.Timeout, func() error {
		found := false
		n.View(func(s *fsm.Machine) { _, found = s.Queue("orders", "orders.created") })
		if !found {
			return fmt.Errorf("the definitions' queue orders.created is not there yet")
		}
		return nil
	})

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}}
	req, _ := http.NewRequest("GET", "https://"+m.addr()+"/api/whoami", nil)
	req.SetBasicAuth("alice", "s3cret") // a user of the loaded definitions
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("whoami over HTTPS: %d %s", resp.StatusCode, body)
	}
}
