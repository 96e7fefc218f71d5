package main

import (
	"strings"
	"testing"
)

// TestVhostLimits_AgainstSingleNodeCluster: set_vhost_limits replaces the
// vhost's limits, list_vhost_limits shows them (--global every vhost's),
// clear_vhost_limits removes them; a bad definition is a usage error and
// a limit raftmq does not know the node's refusal.
func TestVhostLimits_AgainstSingleNodeCluster(t *testing.T) {
	addr := startClusterAdmin(t)
	mustCtl := func(want string, args ...string) {
		t.Helper()
		code, out, errs := ctl(t, addr, append([]string{"--quiet"}, args...)...)
		if code != exitOK || out != want {
			t.Fatalf("%v: exit %d, %q %s; want %q", args, code, out, errs, want)
		}
	}
	mustCtl("Set the limits of vhost \"/\" to {\"max-connections\":256,\"max-queues\":1024}\n",
		"set_vhost_limits", `{"max-connections": 256, "max-queues": 1024}`)
	mustCtl("limit            value\nmax-connections  256\nmax-queues       1024\n", "--consistent", "list_vhost_limits")
	mustCtl("Set the limits of vhost \"/\" to {\"max-queues\":-1}\n", "set_vhost_limits", "-p", "/", `{"max-queues": -1}`)
	mustCtl("vhost  limits\n/      {\"max-queues\":-1}\n", "--consistent", "list_vhost_limits", "--global")
	mustCtl("Cleared the limits of vhost \"/\"\n", "clear_vhost_limits")
	mustCtl("limit  value\n", "--consistent", "list_vhost_limits")

	if code, _, errs := ctl(t, addr, "set_vhost_limits", `{"max-queues": "many"}`); code != exitUsage || !strings.Contains(errs, "max-queues must be an integer") {
		t.Fatalf("bad definition: exit %d %s", code, errs)
	}
	if code, _, errs := ctl(t, addr, "set_vhost_limits", `{"max-channels": 5}`); code == exitOK || !strings.Contains(errs, `unknown vhost limit "max-channels"`) {
		t.Fatalf("unknown limit: exit %d %s", code, errs)
	}
	if code, _, errs := ctl(t, addr, "set_vhost_limits", "-p", "nosuch", `{"max-queues": 5}`); code == exitOK || !strings.Contains(errs, "no vhost 'nosuch'") {
		t.Fatalf("missing vhost: exit %d %s", code, errs)
	}
}
