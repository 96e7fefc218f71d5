package mgmt

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
)

func TestManagementListing(t *testing.T) {
	g := oneNodeManagement(t)
	for i, name := range []string{"alpha", "beta", "gamma"} {
		g.must(http.StatusCreated, "PUT", "/api/queues/%2F/"+name, map[string]any{"arguments": map[string]any{"x-max-length": 10 + i}})
		for range 2 - i {
			g.must(http.StatusOK, "POST", "/api/exchanges/%2F/amq.default/publish", map[string]any{"routing_key": name, "payload": "x"})
		}
	}
	names := func(path string) []string {
		var items []map[string]any
		g.getJSON(path, &items)
		var out []string
		for _, it := range items {
			out = append(out, fmt.Sprint(it["name"]))
		}
		return out
	}
	if got := fmt.Sprint(names("/api/queues?sort=messages")); got != "[gamma beta alpha]" {
		t.Fatalf("sorted by messages: %s", got)
	}
	if got := fmt.Sprint(names("/api/queues?sort=name&sort_reverse=true")); got != "[gamma beta alpha]" {
		t.Fatalf("sorted by name, reversed: %s", got)
	}
	if got := fmt.Sprint(names("/api/queues?name=%5E.a&use_regex=true")); got != "[gamma]" {
		t.Fatalf("filtered by regex: %s", got)
	}
	var cols []map[string]any
	g.getJSON("/api/queues/%2F?columns=name,arguments.x-max-length", &cols)
	if len(cols) != 3 || len(cols[0]) != 2 || cols[0]["arguments"].(map[string]any)["x-max-length"] != float64(10) {
		t.Fatalf("columns: %v", cols)
	}
	var page map[string]any
	if err := json.Unmarshal(g.must(http.StatusOK, "GET", "/api/queues?page=2&page_size=2&sort=name", nil), &page); err != nil {
		t.Fatal(err)
	}
	items := page["items"].([]any)
	if len(items) != 1 || items[0].(map[string]any)["name"] != "gamma" || page["page_count"] != float64(2) ||
		page["total_count"] != float64(3) || page["filtered_count"] != float64(3) || page["item_count"] != float64(1) {
		t.Fatalf("page 2: %v", page)
	}
	g.must(http.StatusBadRequest, "GET", "/api/queues?page=3&page_size=2", nil)
	g.must(http.StatusBadRequest, "GET", "/api/queues?page=1&page_size=501", nil)
}
