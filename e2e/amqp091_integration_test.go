package e2e

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAMQP091Integration runs amqp091-go's own integration tests against
// a raftmq node through e2e/scripts/amqp091-integration.sh: the
// connection-recovery tests, which find their connection by its
// client-given name in the management API's /api/connections and
// force-close it there, and every other test of the client that can pass
// against a broker other than RabbitMQ.
func TestAMQP091Integration(t *testing.T) {
	skipShort(t)
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash to run e2e/scripts/amqp091-integration.sh")
	}
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := Binary(t)
	_, amqpPort, _ := net.SplitHostPort(FreeAddr(t))
	_, mgmtPort, _ := net.SplitHostPort(FreeAddr(t))
	cmd := exec.Command(bash, filepath.Join(root, "e2e", "scripts", "amqp091-integration.sh"), "-v")
	cmd.Env = append(os.Environ(), "RAFTMQ_BIN="+bin, "RAFTMQ_AMQP_PORT="+amqpPort, "RAFTMQ_MANAGEMENT_PORT="+mgmtPort)
	cmd.Env = slicesWithout(cmd.Env, "AMQP_URL=")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 77 {
		t.Skipf("amqp091-go's tests cannot run here:\n%s", out.String())
	}
	if err != nil {
		t.Fatalf("amqp091-integration.sh: %v\n%s", err, out.String())
	}
	// A -run that matched nothing would pass without testing anything.
	if !strings.Contains(out.String(), "--- PASS: TestConnectionRecoveryPublish") {
		t.Fatalf("the connection-recovery tests did not run:\n%s", out.String())
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, "--- ") || strings.HasPrefix(line, "ok ") {
			t.Log(line)
		}
	}
}

// slicesWithout drops the environment entries that start with prefix, so
// that a caller's AMQP_URL does not send the script to another broker.
func slicesWithout(env []string, prefix string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, prefix) {
			out = append(out, e)
		}
	}
	return out
}
