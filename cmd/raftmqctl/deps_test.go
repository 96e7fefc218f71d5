package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoServer checks that raftmqctl stays a small client: it talks
// to a node through proto and api/client only, and links none of the
// node's raft, memberlist or Prometheus.
func TestLinksNoServer(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go tool not found")
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const module = "github.com/raftmq/raftmq/"
	allowed := map[string]bool{
		module + "cmd/raftmqctl":      true,
		module + "proto":              true,
		module + "api/client":         true,
		module + "internal/certchain": true,
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/hashicorp/raft", "github.com/hashicorp/memberlist", "github.com/prometheus/"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("raftmqctl links %s", dep)
			}
		}
		if strings.HasPrefix(dep, module) && !allowed[dep] {
			t.Errorf("raftmqctl links %s; it may use proto and api/client only", dep)
		}
	}
}
