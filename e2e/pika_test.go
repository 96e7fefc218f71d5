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
	py := pythonWithPika(t)
	c := StartCluster(t, 3)
	runPika(t, "pika_ttl.py", py, c.Nodes[0].AMQPURL(), c.Nodes[2].AMQPURL())
}

// pythonWithPika is a python3 that imports pika, or skips the test.
// Debian's python3-pika installs for the system interpreter, which may not
// be the first python3 on PATH.
func pythonWithPika(t *testing.T) string {
	t.Helper()
	for _, cand := range []string{"/usr/bin/python3", "python3"} {
		if p, err := exec.LookPath(cand); err == nil && exec.Command(p, "-c", "import pika").Run() == nil {
			return p
		}
	}
	t.Skip("no python3 with pika (Debian package python3-pika)")
	return ""
}

// runPika runs testdata/script with py and the arguments, and fails the
// test with the script's output when it fails.
func runPika(t *testing.T, script, py string, args ...string) {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("testdata", script))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, append([]string{path}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("pika script %s: %v\n%s", script, err, out)
	}
	t.Logf("%s", out)
}
