package e2e

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// TestCluster_Pika drives the cluster with pika (Debian's python3-pika):
// publish with confirms and a TTL on one node, consume the dead-lettered
// message on another.
func TestCluster_Pika(t *testing.T) {
	skipShort(t)
	// Debian's python3-pika installs for the system interpreter, which may
	// not be the first python3 on PATH.
	py := ""
	for _, cand := range []string{"/usr/bin/python3", "python3"} {
		if p, err := exec.LookPath(cand); err == nil && exec.Command(p, "-c", "import pika").Run() == nil {
			py = p
			break
		}
	}
	if py == "" {
		t.Skip("no python3 with pika (Debian package python3-pika)")
	}
	c := StartCluster(t, 3)
	script, err := filepath.Abs(filepath.Join("testdata", "pika_ttl.py"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, script, c.Nodes[0].AMQPURL(), c.Nodes[2].AMQPURL()).CombinedOutput()
	if err != nil {
		t.Fatalf("pika script: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
