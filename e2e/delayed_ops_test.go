package e2e

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// raftmqctl lists, cancels and purges a delayed exchange's messages through
// a follower: the listing is the follower's own state, the cancel and the
// purge go through the log and leave the leader's state the same.
func TestDelayed_OperatorVerbsThroughAFollower(t *testing.T) {
	skipShort(t)
	c := StartCluster(t, 3)
	f := follower(t, c)
	conn := dial(t, c.Nodes[0])
	ch := confirming(t, conn)
	declareDelayed(t, ch, "ops-dx", "direct")
	mustDeclare(t, ch, "ops-q", nil)
	if err := ch.QueueBind("ops-q", "k", "ops-dx", false, nil); err != nil {
		t.Fatal(err)
	}
	for _, h := range []int{3, 1, 2} {
		confirmOne(t, ch, "ops-dx", "k", false, delayed(strings.Repeat("x", h), int32(h*3600_000)))
	}

	type row struct {
		Seq          uint64 `json:"seq"`
		PayloadBytes int    `json:"payload_bytes"`
	}
	list := func(n *Node) []row {
		t.Helper()
		var rows []row
		if err := json.Unmarshal([]byte(ctl(t, n, "--json", "list_delayed_messages", "ops-dx")), &rows); err != nil {
			t.Fatal(err)
		}
		return rows
	}
	// The follower has applied the publishes once it answers them (the
	// confirms came after a majority, which may not include it yet).
	var rows []row
	if err := Eventually(20*time.Second, func() error {
		rows = list(f)
		if len(rows) != 3 {
			return fmt.Errorf("the follower lists %d", len(rows))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if rows[0].PayloadBytes != 1 || rows[1].PayloadBytes != 2 || rows[2].PayloadBytes != 3 {
		t.Fatalf("not earliest first: %+v", rows)
	}
	ctl(t, f, "cancel_delayed_message", "ops-dx", strconv.FormatUint(rows[0].Seq, 10))
	if _, errOut, code := ctlRun(t, f, "cancel_delayed_message", "ops-dx", strconv.FormatUint(rows[0].Seq, 10)); code != 1 || !strings.Contains(errOut, "NOT_FOUND") {
		t.Fatalf("second cancel: exit %d %s", code, errOut)
	}
	if got := list(f); len(got) != 2 || got[0].Seq != rows[1].Seq {
		t.Fatalf("after the cancel the follower lists %+v", got)
	}
	var purged struct {
		MessageCount int `json:"message_count"`
	}
	if err := json.Unmarshal([]byte(ctl(t, f, "--json", "purge_delayed_messages", "ops-dx")), &purged); err != nil || purged.MessageCount != 2 {
		t.Fatalf("purge: %+v %v", purged, err)
	}
	if err := Eventually(20*time.Second, func() error {
		for _, n := range c.Nodes {
			if got := list(n); len(got) != 0 {
				return fmt.Errorf("%s lists %d after the purge", n.ID, len(got))
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if queued(t, ch, "ops-q") != 0 {
		t.Fatal("a cancelled or purged message reached the queue")
	}
}
