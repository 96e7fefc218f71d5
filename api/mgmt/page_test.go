package mgmt

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/api/ops/opstest"
	"github.com/raftmq/raftmq/proto"
)

// manyQueuesManagement is the management API over a node holding n
// queues q00000.. in vhost "/", queue i with i%97 ready messages, and the
// administrator root (password pw-root).
func manyQueuesManagement(n int) *Server {
	node := opstest.AuthNode()
	node.Update(func(s *opstest.State) {
		s.VhostList = []*proto.VhostInfo{{Name: "/"}}
		for i := range n {
			s.QueueList = append(s.QueueList, &proto.QueueInfo{Vhost: "/", Name: fmt.Sprintf("q%05d", i), Durable: true,
				Ready: uint64(i % 97), EffectiveMessageTtl: -1, EffectiveExpires: -1})
		}
	})
	return New(Options{Ops: ops.New(ops.Deps{Node: unlockedView{node}})})
}

// unlockedView is a fake node whose View does not hold the node's lock,
// as the queue listing asks the node for each queue's group inside its
// view (a cluster node's locks allow that, the fake's one mutex does not). The
// tests using it change nothing while serving.
type unlockedView struct{ *opstest.Node }

func (n unlockedView) View(fn func(ops.State))      { fn(n.State) }
func (n unlockedView) LocalView(fn func(ops.State)) { fn(n.State) }

// listingPage is the page object of a paged listing, RabbitMQ's shape.
type listingPage struct {
	Items         []map[string]any `json:"items"`
	Page          int              `json:"page"`
	PageCount     int              `json:"page_count"`
	PageSize      int              `json:"page_size"`
	TotalCount    int              `json:"total_count"`
	FilteredCount int              `json:"filtered_count"`
	ItemCount     int              `json:"item_count"`
}

func decodePage(t *testing.T, w *httptest.ResponseRecorder) listingPage {
	t.Helper()
	var page listingPage
	if err := json.Unmarshal(w.Body.Bytes(), &page); err != nil {
		t.Fatalf("%v: %s", err, w.Body)
	}
	return page
}

func serveAs(h http.Handler, path string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", path, nil)
	r.SetBasicAuth("root", "pw-root")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestManagementQueuePageOfMany: a page of a 10,000-queue listing, sorted
// as the console sorts it, answers its 100 queues in RabbitMQ's page shape
// and builds the JSON of little more than that page: a tenth of what the
// whole listing costs in allocations is a generous bound (building every
// queue's object first, then cutting the page, costs about as much as the
// whole listing).
func TestManagementQueuePageOfMany(t *testing.T) {
	const total = 10000
	m := manyQueuesManagement(total)
	paged := "/api/queues/%2F?page=3&page_size=100&sort=messages&sort_reverse=true"
	w := serveAs(m, paged)
	if w.Code != http.StatusOK {
		t.Fatalf("paged listing: %d %s", w.Code, w.Body)
	}
	page := decodePage(t, w)
	if len(page.Items) != 100 || page.ItemCount != 100 || page.Page != 3 || page.PageCount != 100 || page.PageSize != 100 ||
		page.TotalCount != total || page.FilteredCount != total {
		t.Fatalf("page: %d items, %+v", len(page.Items), page)
	}
	// Sorted by messages, highest first: pages 1 to 3 hold the queues with
	// 96 messages (103 of them), 95 (103 more), then 94.
	if first, last := page.Items[0], page.Items[99]; first["messages"] != float64(95) || last["messages"] != float64(94) ||
		first["effective_message_ttl"] != nil || first["type"] != "classic" {
		t.Fatalf("page 3 runs from %v to %v", first, last)
	}

	whole := testing.AllocsPerRun(3, func() { serveAs(m, "/api/queues/%2F") })
	for _, path := range []string{paged, "/api/queues?page=7&page_size=100&sort=next_death", "/api/queues?page=1&page_size=100&sort=effective_message_ttl"} {
		one := testing.AllocsPerRun(3, func() { serveAs(m, path) })
		t.Logf("allocations: whole listing %.0f, %s %.0f", whole, path, one)
		if one > whole/10 {
			t.Fatalf("%s of %d queues costs %.0f allocations, the whole listing %.0f: the page builds more than its own queues", path, total, one, whole)
		}
	}
}

// TestManagementFilteredPage: the name filter and a sort key the queue
// cannot give without its object (arguments) still page correctly.
func TestManagementFilteredPage(t *testing.T) {
	m := manyQueuesManagement(300)
	w := serveAs(m, "/api/queues?page=2&page_size=5&name=%5Eq001&use_regex=true&sort=arguments&columns=name,messages")
	if w.Code != http.StatusOK {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	page := decodePage(t, w)
	if page.FilteredCount != 100 || page.TotalCount != 300 || len(page.Items) != 5 ||
		page.Items[0]["name"] != "q00105" || len(page.Items[0]) != 2 {
		t.Fatalf("page: %s", w.Body)
	}
}

func BenchmarkManagementQueuePage(b *testing.B) {
	m := manyQueuesManagement(10000)
	for b.Loop() {
		if w := serveAs(m, "/api/queues?page=1&page_size=100&sort=messages&sort_reverse=true"); w.Code != http.StatusOK {
			b.Fatal(w.Code)
		}
	}
}

// TestManagementServesTheConsole: the console's page is served at / without
// credentials, the API beside it still asks for them.
func TestManagementServesTheConsole(t *testing.T) {
	m := manyQueuesManagement(1)
	w := httptest.NewRecorder()
	m.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `<script src="app.js"`) {
		t.Fatalf("GET /: %d %.200s", w.Code, w.Body)
	}
	w = httptest.NewRecorder()
	m.ServeHTTP(w, httptest.NewRequest("GET", "/api/queues", nil))
	if w.Code != http.StatusUnauthorized {
		t.Fatalf("GET /api/queues without credentials: %d", w.Code)
	}
	if w := serveAs(m, "/api/nope"); w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), `"Object Not Found"`) {
		t.Fatalf("GET /api/nope: %d %s", w.Code, w.Body)
	}
}

// TestManagementChallengeAndScripts: a 401 carries RabbitMQ's
// WWW-Authenticate challenge, wrong credentials or none, except to a
// script's request (X-Requested-With: XMLHttpRequest, as the console
// sends): a browser would answer the challenge with a login dialog of its
// own over the console's.
func TestManagementChallengeAndScripts(t *testing.T) {
	m := manyQueuesManagement(1)
	for _, tc := range []struct {
		user, pass, path string
		script           bool
	}{
		{"", "", "/api/overview", false},
		{"root", "wrong", "/api/overview", false},
		{"root", "wrong", "/api/overview", true},
		{"joe", "pw-joe", "/api/overview", true},      // no management tag
		{"watcher", "pw-watcher", "/api/users", true}, // not an administrator
		{"watcher", "pw-watcher", "/api/users", false},
	} {
		r := httptest.NewRequest("GET", tc.path, nil)
		if tc.user != "" {
			r.SetBasicAuth(tc.user, tc.pass)
		}
		if tc.script {
			r.Header.Set("X-Requested-With", "XMLHttpRequest")
		}
		w := httptest.NewRecorder()
		m.ServeHTTP(w, r)
		challenge := w.Header().Get("WWW-Authenticate")
		if w.Code != http.StatusUnauthorized || (challenge == "") != tc.script {
			t.Fatalf("%s as %q (script %v): %d, WWW-Authenticate %q", tc.path, tc.user, tc.script, w.Code, challenge)
		}
	}
}
