package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestDamagedNode_ExitsWithTheWayBackAndRejoinsWiped damages a follower's
// write-ahead log meta database, checks that the node exits (not panics)
// with an error naming the file and docs/operations.md, then follows the
// documented procedure: an empty data dir, the same node id, and the node
// rejoins and serves what was committed while it was away.
func TestDamagedNode_ExitsWithTheWayBackAndRejoinsWiped(t *testing.T) {
	skipShort(t)
	c := StartCluster(t, 3)
	ch := channel(t, dial(t, c.Nodes[0]))
	mustDeclare(t, ch, "damage-q", nil)
	publishConfirmed(t, ch, "", "damage-q", []amqp.Publishing{{MessageId: "before", Body: []byte("before")}})

	const victim = 1
	c.Kill(victim)
	meta := filepath.Join(c.Nodes[victim].DataDir, "wal", "wal-meta.db")
	if err := os.WriteFile(meta, []byte(strings.Repeat("not a database ", 1024)), 0o600); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "", "damage-q", []amqp.Publishing{{MessageId: "while-away", Body: []byte("while-away")}})

	c.Start(victim)
	code, err := c.WaitExit(victim, 30*time.Second)
	if err != nil {
		t.Fatalf("a node on damaged data: %v\n%s", err, c.LogTail(victim, 4096))
	}
	logged := c.LogTail(victim, 8192)
	if code == 0 {
		t.Errorf("exit status 0 on damaged data")
	}
	for _, want := range []string{"cannot read " + meta, "move its data dir aside", "docs/operations.md"} {
		if !strings.Contains(logged, want) {
			t.Errorf("the node's log does not say %q:\n%s", want, logged)
		}
	}
	if strings.Contains(logged, "panic:") {
		t.Errorf("the node panicked:\n%s", logged)
	}

	// The way back: move the data dir aside and start with the same id.
	if err := os.Rename(c.Nodes[victim].DataDir, c.Nodes[victim].DataDir+".damaged"); err != nil {
		t.Fatal(err)
	}
	c.Start(victim)
	c.WaitReady(victim, 60*time.Second)
	got := channel(t, dial(t, c.Nodes[victim]))
	ids := map[string]bool{}
	err = Eventually(20*time.Second, func() error {
		m, ok, err := got.Get("damage-q", true)
		if err != nil {
			return err
		}
		if ok {
			ids[m.MessageId] = true
		}
		if !ids["before"] || !ids["while-away"] {
			return fmt.Errorf("got %v so far", ids)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("through the rejoined node: got %v, want both messages: %v", ids, err)
	}
}
