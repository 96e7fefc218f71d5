package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/proto"
)

// startDelayedAdmin serves the Admin service of a one-node cluster with a
// delayed exchange dx (as direct, bound to q by k) holding three messages
// due in 10, 20 and 30 minutes, and a direct exchange plain.
func startDelayedAdmin(t *testing.T) string {
	t.Helper()
	node := readyNode(t)
	svc := ops.New(ops.Deps{Node: node})
	ctx := context.Background()
	str := func(s string) *proto.Value { return &proto.Value{Kind: &proto.Value_LongString{LongString: []byte(s)}} }
	cmds := []*proto.Command{
		{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{Vhost: "/", Name: "dx", Type: "x-delayed-message", Durable: true,
			Arguments: &proto.Table{Fields: []*proto.Field{{Key: "x-delayed-type", Value: str("direct")}}}}}},
		{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{Vhost: "/", Name: "plain", Type: "direct", Durable: true}}},
		{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "q", Durable: true}}},
		{Cmd: &proto.Command_Bind{Bind: &proto.Bind{Vhost: "/", Source: "dx", Destination: "q", RoutingKey: "k"}}},
	}
	for i, body := range []string{"a", "bb", "ccc"} {
		delay := &proto.Value{Kind: &proto.Value_Int64{Int64: int64(i+1) * 600_000}}
		cmds = append(cmds, &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", Exchange: "dx", RoutingKey: "k", Body: []byte(body),
			Properties: &proto.Properties{Headers: &proto.Table{Fields: []*proto.Field{{Key: "x-delay", Value: delay}, {Key: "h", Value: str("v")}}}}}}})
	}
	for _, cmd := range cmds {
		r, err := node.Submit(ctx, cmd)
		if err != nil || r.GetCode() != 0 {
			t.Fatalf("%v: %v %v", cmd, r, err)
		}
	}
	return serveAdmin(t, svc)
}

func TestDelayedVerbs(t *testing.T) {
	addr := startDelayedAdmin(t)

	code, out, errs := ctl(t, addr, "--json", "list_delayed_messages", "dx")
	if code != exitOK {
		t.Fatalf("list exit %d: %s", code, errs)
	}
	var rows []struct {
		Seq          uint64 `json:"seq"`
		Due          string `json:"due"`
		RoutingKey   string `json:"routing_key"`
		PayloadBytes int    `json:"payload_bytes"`
		Headers      string `json:"headers"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(rows) != 3 || rows[0].PayloadBytes != 1 || rows[2].PayloadBytes != 3 || rows[0].RoutingKey != "k" ||
		!strings.Contains(rows[0].Headers, `"h":"v"`) || rows[0].Due == "" || rows[0].Due >= rows[1].Due {
		t.Fatalf("listed %s", out)
	}

	// A page: the second one alone, in a table with the columns asked for.
	code, out, errs = ctl(t, addr, "-q", "list_delayed_messages", "dx", "seq", "payload_bytes", "--limit", "1", "--offset", "1")
	if code != exitOK || out != "seq  payload_bytes\n"+itoa(rows[1].Seq)+"    2\n" {
		t.Fatalf("page exit %d: %q %s", code, out, errs)
	}

	code, out, errs = ctl(t, addr, "cancel_delayed_message", "dx", itoa(rows[0].Seq))
	if code != exitOK || !strings.Contains(out, "Cancelled delayed message") {
		t.Fatalf("cancel exit %d: %s %s", code, out, errs)
	}
	if code, _, errs = ctl(t, addr, "cancel_delayed_message", "dx", itoa(rows[0].Seq)); code != exitFailed || !strings.Contains(errs, "NotFound") {
		t.Fatalf("second cancel exit %d: %s", code, errs)
	}
	code, out, _ = ctl(t, addr, "--json", "list_exchanges", "name", "messages_delayed", "next_delayed_due")
	var xs []map[string]any
	_ = json.Unmarshal([]byte(out), &xs)
	shown := false
	for _, x := range xs {
		if x["name"] == "dx" {
			shown = x["messages_delayed"] == float64(2) && x["next_delayed_due"] == rows[1].Due
		}
	}
	if code != exitOK || !shown {
		t.Fatalf("list_exchanges exit %d: %s", code, out)
	}

	code, out, errs = ctl(t, addr, "--json", "purge_delayed_messages", "dx")
	var purged map[string]any
	_ = json.Unmarshal([]byte(out), &purged)
	if code != exitOK || purged["message_count"] != float64(2) {
		t.Fatalf("purge exit %d: %s %s", code, out, errs)
	}
	if code, out, _ = ctl(t, addr, "--json", "list_delayed_messages", "dx"); code != exitOK || strings.TrimSpace(out) != "[]" {
		t.Fatalf("after purge exit %d: %s", code, out)
	}

	for _, tc := range []struct {
		args []string
		code int
		text string
	}{
		{[]string{"list_delayed_messages", "nope"}, exitFailed, "NotFound"},
		{[]string{"list_delayed_messages", "plain"}, exitFailed, "not an x-delayed-message exchange"},
		{[]string{"purge_delayed_messages", "plain"}, exitFailed, "not an x-delayed-message exchange"},
		{[]string{"list_delayed_messages", "dx", "--limit", "0"}, exitUsage, "--limit"},
		{[]string{"list_delayed_messages", "dx", "--offset", "9950", "--limit", "51"}, exitUsage, "--limit"},
		{[]string{"list_delayed_messages", "dx", "bogus"}, exitUsage, "unknown column"},
		{[]string{"cancel_delayed_message", "dx", "x"}, exitUsage, "not the sequence number"},
		{[]string{"cancel_delayed_message", "dx"}, exitUsage, "usage"},
	} {
		code, _, errs := ctl(t, addr, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.text) {
			t.Errorf("%v: exit %d %s, want %d %q", tc.args, code, errs, tc.code, tc.text)
		}
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
