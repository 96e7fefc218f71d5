package e2e

import (
	"testing"
	"time"
)

// TestCluster_Pika drives the cluster with pika (Debian's python3-pika):
// publish with confirms and a TTL on one node, consume the dead-lettered
// message on another.
func TestCluster_Pika(t *testing.T) {
	skipShort(t)
	py := pythonWithPika(t)
	forShapes(t, everyShape, func(t *testing.T, s shape) {
		c := s.start(t)
		runPika(t, "pika_ttl.py", py, c.Nodes[0].AMQPURL(), c.Nodes[s.nodes-1].AMQPURL())
	})
}

// pythonWithPika is a python3 that imports pika, or skips the test.
func pythonWithPika(t *testing.T) string {
	t.Helper()
	return pythonWithModule(t, "pika", "python3-pika")
}

// runPika runs testdata/script with py and the arguments (runPythonClient)
// and stops the test when it fails: some callers go on to look at what the
// script left behind. The scripts print no line for each check, so
// reportChecks does not apply: a script exits non-zero, saying why, when a
// check fails. Each bounds its own waits (pika_timeout.py's by the
// consumer timeout it is given plus 90 s, twice: against a RabbitMQ
// with a timeout of a minute, about six); a hang past those bounds is
// killed.
func runPika(t *testing.T, script, py string, args ...string) {
	t.Helper()
	if !runPythonClient(t, py, script, 10*time.Minute, nil, nil, args...) {
		t.FailNow()
	}
}
