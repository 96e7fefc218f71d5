package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/raftmq/raftmq/api/mgmt"
	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/proto"
)

func noGRPC(string) (proto.AdminClient, error) { return nil, nil }

// TestDefinitionsVerbs imports RabbitMQ 3.10.8's definitions through a
// node's management API and exports them back.
func TestDefinitionsVerbs(t *testing.T) {
	c := clustertest.New(t, 1)
	n := c.WaitForLeader(clustertest.Timeout)
	admin := ops.New(ops.Deps{Node: ops.FromCluster(n)})
	t.Cleanup(func() { _ = admin.Close() })
	srv := httptest.NewServer(mgmt.New(mgmt.Options{Ops: admin}))
	t.Cleanup(srv.Close)
	file := filepath.Join("..", "..", "api", "mgmt", "testdata", "rabbitmq-3.10.8", "definitions.json")

	var out, errb bytes.Buffer
	// The leader's defaults (guest) may still be on their way.
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		out.Reset()
		errb.Reset()
		if code := run([]string{"--management-url", srv.URL, "import_definitions", file}, &out, &errb, noGRPC); code != exitOK {
			return fmt.Errorf("import: exit %d: %s", code, errb.String())
		}
		return nil
	})
	if !strings.Contains(out.String(), "warning: global parameter 'cluster_name' is not imported") ||
		!strings.Contains(out.String(), "Imported definitions from "+file+" (2 warnings)") {
		t.Fatalf("import output:\n%s", out.String())
	}

	out.Reset()
	if code := run([]string{"--management-url", srv.URL, "export_definitions", "-"}, &out, &errb, noGRPC); code != exitOK {
		t.Fatalf("export: exit %d: %s", code, errb.String())
	}
	var got, want struct {
		Queues []map[string]any `json:"queues"`
		Users  []map[string]any `json:"users"`
	}
	raw, _ := os.ReadFile(file)
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("export is not JSON: %v\n%s", err, out.String())
	}
	if len(got.Queues) != len(want.Queues) || len(got.Users) != len(want.Users) {
		t.Fatalf("exported %d queues and %d users, want %d and %d", len(got.Queues), len(got.Users), len(want.Queues), len(want.Users))
	}

	// A refused login is an error with the API's reason.
	errb.Reset()
	code := run([]string{"--management-url", srv.URL, "--username", "guest", "--password", "nope", "export_definitions", "-"}, &out, &errb, noGRPC)
	if code != exitFailed || !strings.Contains(errb.String(), "401 Login failed") {
		t.Fatalf("bad password: exit %d, stderr %q", code, errb.String())
	}
}
