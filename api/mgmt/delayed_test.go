package mgmt

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// delayedManagement serves a one-node cluster's management API with a
// delayed exchange dx (routing as direct) bound to queue q by key k, and a
// direct exchange plain.
func delayedManagement(t *testing.T) mgmtClient {
	t.Helper()
	c := oneNodeManagement(t)
	c.must(http.StatusCreated, "PUT", "/api/exchanges/%2F/dx", map[string]any{"type": "x-delayed-message", "durable": true,
		"arguments": map[string]any{"x-delayed-type": "direct"}})
	c.must(http.StatusCreated, "PUT", "/api/exchanges/%2F/plain", map[string]any{"type": "direct"})
	c.must(http.StatusCreated, "PUT", "/api/queues/%2F/q", map[string]any{"durable": true})
	c.must(http.StatusCreated, "POST", "/api/bindings/%2F/e/dx/q/q", map[string]any{"routing_key": "k"})
	return c
}

// publishDelayed publishes body to dx with routing key k, delayed ms.
func publishDelayed(c mgmtClient, body string, ms int) {
	c.t.Helper()
	var r map[string]bool
	if err := json.Unmarshal(c.must(http.StatusOK, "POST", "/api/exchanges/%2F/dx/publish", map[string]any{
		"routing_key": "k", "payload": body, "payload_encoding": "string",
		"properties": map[string]any{"headers": map[string]any{"x-delay": ms, "h": "v"}}}), &r); err != nil {
		c.t.Fatal(err)
	}
}

func TestManagementDelayedExchangeShowsWaitingMessages(t *testing.T) {
	c := delayedManagement(t)
	var x map[string]any
	c.getJSON("/api/exchanges/%2F/dx", &x)
	if x["messages_delayed"] != float64(0) || x["next_delayed_due"] != nil {
		t.Fatalf("empty dx %v", x)
	}
	publishDelayed(c, "late", 3_600_000)
	publishDelayed(c, "early", 600_000)
	c.getJSON("/api/exchanges/%2F/dx", &x)
	due, _ := x["next_delayed_due"].(string)
	if x["messages_delayed"] != float64(2) || !strings.HasSuffix(due, "Z") {
		t.Fatalf("dx %v", x)
	}
	var all []map[string]any
	c.getJSON("/api/exchanges/%2F", &all)
	for _, e := range all {
		_, has := e["messages_delayed"]
		if has != (e["name"] == "dx") {
			t.Errorf("exchange %v: messages_delayed shown %v", e["name"], has)
		}
		if e["name"] == "dx" && (e["messages_delayed"] != float64(2) || e["next_delayed_due"] != due) {
			t.Errorf("listed dx %v", e)
		}
	}
}

func TestManagementDelayedListCancelPurge(t *testing.T) {
	c := delayedManagement(t)
	for i, ms := range []int{900_000, 600_000, 700_000} {
		publishDelayed(c, strings.Repeat("b", i+1), ms)
	}
	var p struct {
		Items      []map[string]any `json:"items"`
		ItemCount  int              `json:"item_count"`
		Page       int              `json:"page"`
		PageSize   int              `json:"page_size"`
		PageCount  int              `json:"page_count"`
		TotalCount int              `json:"total_count"`
	}
	c.getJSON("/api/exchanges/%2F/dx/delayed?page=1&page_size=2", &p)
	if p.ItemCount != 2 || p.Page != 1 || p.PageSize != 2 || p.PageCount != 2 || p.TotalCount != 3 || len(p.Items) != 2 {
		t.Fatalf("page 1 %+v", p)
	}
	first, second := p.Items[0], p.Items[1]
	if first["routing_key"] != "k" || first["payload_bytes"] != float64(2) || first["headers"].(map[string]any)["h"] != "v" ||
		first["exchange"] != "dx" || first["vhost"] != "/" || second["payload_bytes"] != float64(3) ||
		first["due_ms"].(float64) >= second["due_ms"].(float64) || first["due"] == nil {
		t.Fatalf("earliest first, with key, headers and size: %v", p.Items)
	}
	c.getJSON("/api/exchanges/%2F/dx/delayed?page=2&page_size=2", &p)
	if p.ItemCount != 1 || p.Items[0]["payload_bytes"] != float64(1) {
		t.Fatalf("page 2 %+v", p)
	}
	c.getJSON("/api/exchanges/%2F/dx/delayed", &p)
	if p.ItemCount != 3 || p.PageSize != defaultPageSize {
		t.Fatalf("default page %+v", p)
	}

	// Cancel the earliest: two wait, the next due is the second's.
	c.must(http.StatusNoContent, "DELETE", fmt.Sprintf("/api/exchanges/%%2F/dx/delayed/%d", int64(first["seq"].(float64))), nil)
	c.must(http.StatusNotFound, "DELETE", fmt.Sprintf("/api/exchanges/%%2F/dx/delayed/%d", int64(first["seq"].(float64))), nil)
	var x map[string]any
	c.getJSON("/api/exchanges/%2F/dx", &x)
	if x["messages_delayed"] != float64(2) || x["next_delayed_due"] != second["due"] {
		t.Fatalf("after cancel %v (second due %v)", x, second["due"])
	}

	var purged map[string]any
	if err := json.Unmarshal(c.must(http.StatusOK, "DELETE", "/api/exchanges/%2F/dx/delayed", nil), &purged); err != nil {
		t.Fatal(err)
	}
	if purged["message_count"] != float64(2) {
		t.Fatalf("purge %v", purged)
	}
	c.getJSON("/api/exchanges/%2F/dx", &x)
	if x["messages_delayed"] != float64(0) || x["next_delayed_due"] != nil {
		t.Fatalf("after purge %v", x)
	}
	c.getJSON("/api/exchanges/%2F/dx/delayed", &p)
	if p.ItemCount != 0 || p.TotalCount != 0 || p.Items == nil {
		t.Fatalf("empty %+v", p)
	}
	var q map[string]any
	c.getJSON("/api/queues/%2F/q", &q)
	if q["messages"] != float64(0) {
		t.Fatalf("a cancelled or purged message reached the queue: %v", q)
	}
}

func TestManagementDelayedErrors(t *testing.T) {
	c := delayedManagement(t)
	publishDelayed(c, "b", 600_000)
	for _, tc := range []struct {
		method, path string
		code         int
		text         string
	}{
		{"GET", "/api/exchanges/%2F/nope/delayed", http.StatusNotFound, ""},
		{"DELETE", "/api/exchanges/%2F/nope/delayed", http.StatusNotFound, ""},
		{"DELETE", "/api/exchanges/%2F/nope/delayed/1", http.StatusNotFound, ""},
		{"GET", "/api/exchanges/nope/dx/delayed", http.StatusNotFound, ""},
		{"GET", "/api/exchanges/%2F/plain/delayed", http.StatusBadRequest, "not an x-delayed-message exchange"},
		{"DELETE", "/api/exchanges/%2F/plain/delayed", http.StatusBadRequest, "not an x-delayed-message exchange"},
		{"DELETE", "/api/exchanges/%2F/plain/delayed/1", http.StatusBadRequest, "not an x-delayed-message exchange"},
		{"GET", "/api/exchanges/%2F/dx/delayed?page=0", http.StatusBadRequest, "page must be"},
		{"GET", "/api/exchanges/%2F/dx/delayed?page=x", http.StatusBadRequest, "page must be"},
		{"GET", "/api/exchanges/%2F/dx/delayed?page_size=501", http.StatusBadRequest, "page must be"},
		{"GET", "/api/exchanges/%2F/dx/delayed?page_size=-1", http.StatusBadRequest, "page must be"},
		{"GET", "/api/exchanges/%2F/dx/delayed?page=2", http.StatusBadRequest, "beyond the last page"},
		{"GET", "/api/exchanges/%2F/dx/delayed?page=21&page_size=500", http.StatusBadRequest, "beyond the earliest 10000"},
		{"DELETE", "/api/exchanges/%2F/dx/delayed/x", http.StatusBadRequest, "not the sequence number"},
		{"DELETE", "/api/exchanges/%2F/dx/delayed/0", http.StatusBadRequest, "not the sequence number"},
		{"DELETE", "/api/exchanges/%2F/dx/delayed/999", http.StatusNotFound, ""},
		{"GET", "/api/exchanges/%2F/dx/delayed/1", http.StatusMethodNotAllowed, ""},
		{"PUT", "/api/exchanges/%2F/dx/delayed", http.StatusMethodNotAllowed, ""},
		{"DELETE", "/api/exchanges/%2F/dx/delayed/1/x", http.StatusNotFound, ""},
	} {
		code, body, _ := c.do(tc.method, tc.path, nil)
		if code != tc.code || !strings.Contains(string(body), tc.text) {
			t.Errorf("%s %s: %d %s, want %d %q", tc.method, tc.path, code, body, tc.code, tc.text)
		}
	}
	var x map[string]any
	c.getJSON("/api/exchanges/%2F/dx", &x)
	if x["messages_delayed"] != float64(1) {
		t.Fatalf("a refused request changed dx: %v", x)
	}
}

// TestManagementDelayedNeedsReadPermission: a user who may not read the
// exchange neither lists nor drops its messages.
func TestManagementDelayedNeedsReadPermission(t *testing.T) {
	c := delayedManagement(t)
	publishDelayed(c, "b", 600_000)
	c.must(http.StatusCreated, "PUT", "/api/users/ro", map[string]any{"password": "pw", "tags": "management"})
	c.must(http.StatusCreated, "PUT", "/api/permissions/%2F/ro", map[string]any{"configure": ".*", "write": ".*", "read": "^q$"})
	ro := mgmtClient{t: t, base: c.base, user: "ro", pass: "pw"}
	for _, m := range []string{"GET", "DELETE"} {
		if code, body, _ := ro.do(m, "/api/exchanges/%2F/dx/delayed", nil); code != http.StatusUnauthorized {
			t.Errorf("%s: %d %s", m, code, body)
		}
	}
	var x map[string]any
	c.getJSON("/api/exchanges/%2F/dx", &x)
	if x["messages_delayed"] != float64(1) {
		t.Fatalf("dx %v", x)
	}
}

// TestManagementDefinitionsKeepDelayedExchange: an export holds the
// delayed exchange with its x-delayed-type, and importing it declares it
// again as it was.
func TestManagementDefinitionsKeepDelayedExchange(t *testing.T) {
	c := delayedManagement(t)
	export := c.must(http.StatusOK, "GET", "/api/definitions", nil)
	var defs struct {
		Exchanges []map[string]any `json:"exchanges"`
	}
	if err := json.Unmarshal(export, &defs); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, x := range defs.Exchanges {
		if x["name"] == "dx" {
			found = x["type"] == "x-delayed-message" && x["arguments"].(map[string]any)["x-delayed-type"] == "direct"
		}
	}
	if !found {
		t.Fatalf("export %s", export)
	}
	c.must(http.StatusNoContent, "DELETE", "/api/exchanges/%2F/dx", nil)
	c.must(http.StatusNotFound, "GET", "/api/exchanges/%2F/dx", nil)
	c.must(http.StatusOK, "POST", "/api/definitions", export)
	var x map[string]any
	c.getJSON("/api/exchanges/%2F/dx", &x)
	if x["type"] != "x-delayed-message" || x["arguments"].(map[string]any)["x-delayed-type"] != "direct" || x["messages_delayed"] != float64(0) {
		t.Fatalf("imported %v", x)
	}
	// It delays again, through its restored binding.
	publishDelayed(c, "b", 600_000)
	c.getJSON("/api/exchanges/%2F/dx", &x)
	if x["messages_delayed"] != float64(1) {
		t.Fatalf("after import %v", x)
	}
}
