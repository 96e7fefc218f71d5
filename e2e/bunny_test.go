package e2e

import (
	"os/exec"
	"testing"
	"time"
)

// TestCluster_Bunny drives three placing nodes with Bunny (Debian's
// ruby-bunny), publishing through one node and consuming through another:
// confirms, properties and headers as Ruby types, a nack, a dead letter, a
// mandatory return, a headers exchange, refusals and a 1 MiB body
// (testdata/bunny_check.rb).
func TestCluster_Bunny(t *testing.T) {
	skipShort(t)
	ruby := rubyWithBunny(t)
	c := placed3.start(t)
	cmd := exec.Command(ruby, testdataPath(t, "bunny_check.rb"), c.Nodes[0].AMQPSpecURL(), c.Nodes[2].AMQPSpecURL())
	runClient(t, "bunny_check.rb", cmd, 2*time.Minute, nil)
}

// TestCluster_BunnyRecovery kills -9 the node a Bunny connection with the
// addresses of all three nodes is on, while it publishes with confirms and
// consumes: its automatic recovery goes on through another node, and every
// confirmed message is consumed (testdata/bunny_recovery.rb).
func TestCluster_BunnyRecovery(t *testing.T) {
	skipShort(t)
	ruby := rubyWithBunny(t)
	c := placed3.start(t)
	args := append([]string{testdataPath(t, "bunny_recovery.rb")}, amqpAddrs(c)...)
	onLine, killed := nodeKiller(t, c, nil)
	runClient(t, "bunny_recovery.rb", exec.Command(ruby, args...), 2*time.Minute, onLine)
	if killed() < 0 {
		t.Error("bunny_recovery.rb never asked for its node to be killed")
	}
}

// rubyWithBunny is a ruby that loads Bunny, or skips the test.
func rubyWithBunny(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("ruby"); err == nil && exec.Command(p, "-e", `require "bunny"`).Run() == nil {
		return p
	}
	t.Skip("no ruby with Bunny (Debian package ruby-bunny)")
	return ""
}
