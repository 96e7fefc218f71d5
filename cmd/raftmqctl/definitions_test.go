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
)

// rabbitDefinitions is RabbitMQ 3.10.8's export of a realistic topology.
var rabbitDefinitions = filepath.Join("..", "..", "api", "mgmt", "testdata", "rabbitmq-3.10.8", "definitions.json")

// TestDefinitionsVerbs_ManagementFallback imports RabbitMQ 3.10.8's
// definitions through the management API of a node whose admin API has no
// definitions calls (a node from before them), and exports them back.
func TestDefinitionsVerbs_ManagementFallback(t *testing.T) {
	noDefinitions, _ := startFake(t, &fakeAdmin{})
	c := clustertest.New(t, 1)
	n := c.WaitForLeader(clustertest.Timeout)
	admin := ops.New(ops.Deps{Node: ops.FromCluster(n)})
	t.Cleanup(func() { _ = admin.Close() })
	srv := httptest.NewServer(mgmt.New(mgmt.Options{Ops: admin}))
	t.Cleanup(srv.Close)
	file := rabbitDefinitions

	var out, errb bytes.Buffer
	// The leader's defaults (guest) may still be on their way.
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		out.Reset()
		errb.Reset()
		if code := run([]string{"--management-url", srv.URL, "import_definitions", file}, &out, &errb, noDefinitions); code != exitOK {
			return fmt.Errorf("import: exit %d: %s", code, errb.String())
		}
		return nil
	})
	if !strings.Contains(out.String(), "warning: global parameter 'cluster_name' is not imported") ||
		!strings.Contains(out.String(), "Imported definitions from "+file+" (2 warnings)") {
		t.Fatalf("import output:\n%s", out.String())
	}

	out.Reset()
	if code := run([]string{"--management-url", srv.URL, "export_definitions", "-"}, &out, &errb, noDefinitions); code != exitOK {
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
	code := run([]string{"--management-url", srv.URL, "--username", "guest", "--password", "nope", "export_definitions", "-"}, &out, &errb, noDefinitions)
	if code != exitFailed || !strings.Contains(errb.String(), "401 Login failed") {
		t.Fatalf("bad password: exit %d, stderr %q", code, errb.String())
	}
}

// TestDefinitionsVerbs_AdminSecret: run as the node's OS user,
// import_definitions and export_definitions need no password, as
// rabbitmqctl's need only the Erlang cookie: they go through the admin API
// with the data dir's admin secret (no management API is reachable here).
// Without the secret they are refused; an administrator's password still
// works.
func TestDefinitionsVerbs_AdminSecret(t *testing.T) {
	addr, dataDir := serveLocalAdmin(t)
	nowhere := []string{"--management-url", "http://127.0.0.1:1"}

	code, out, errs := ctl(t, addr, append(nowhere, "--data-dir", dataDir, "import_definitions", rabbitDefinitions)...)
	if code != exitOK || !strings.Contains(out, "warning: global parameter 'cluster_name' is not imported") ||
		!strings.Contains(out, "Imported definitions from "+rabbitDefinitions+" (2 warnings)") {
		t.Fatalf("import with the admin secret: exit %d, out %q, err %q", code, out, errs)
	}
	exported := filepath.Join(t.TempDir(), "defs.json")
	code, out, errs = ctl(t, addr, append(nowhere, "--data-dir", dataDir, "export_definitions", exported)...)
	if code != exitOK || out != "Exported definitions to "+exported+"\n" {
		t.Fatalf("export with the admin secret: exit %d, out %q, err %q", code, out, errs)
	}
	var got, want struct {
		Queues []map[string]any `json:"queues"`
		Users  []map[string]any `json:"users"`
	}
	for file, v := range map[string]any{rabbitDefinitions: &want, exported: &got} {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	// RabbitMQ's users beside the node's default guest, which the file
	// has too.
	if len(got.Queues) != len(want.Queues) || len(got.Users) != len(want.Users) {
		t.Fatalf("exported %d queues and %d users, want %d and %d", len(got.Queues), len(got.Users), len(want.Queues), len(want.Users))
	}
	if fi, err := os.Stat(exported); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the export holds password hashes: mode %v, %v", fi.Mode(), err)
	}

	// Without the secret, no password: refused, with what to do.
	empty := t.TempDir()
	for _, verb := range [][]string{{"export_definitions", "-"}, {"import_definitions", rabbitDefinitions}} {
		code, out, errs = ctl(t, addr, append(append(nowhere, "--data-dir", empty), verb...)...)
		if code != exitFailed || !strings.Contains(errs, "Unauthenticated") || !strings.Contains(errs, "no admin secret at") || out != "" {
			t.Fatalf("%s without the secret: exit %d, out %q, err %q", verb[0], code, out, errs)
		}
	}
	// An administrator's password.
	code, out, errs = ctl(t, addr, append(nowhere, "--data-dir", empty, "--username", "guest", "--password", "guest", "export_definitions", "-")...)
	if code != exitOK || !strings.Contains(out, `"rabbitmq_version"`) {
		t.Fatalf("export as an administrator: exit %d, err %q", code, errs)
	}
	// A file that is not definitions is refused with the reason.
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte("[1, 2"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs = ctl(t, addr, append(nowhere, "--data-dir", dataDir, "import_definitions", bad)...)
	if code != exitFailed || !strings.Contains(errs, "InvalidArgument") || !strings.Contains(errs, "definitions are not a JSON object") {
		t.Fatalf("import of a broken file: exit %d, err %q", code, errs)
	}
}
