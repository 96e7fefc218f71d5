package mgmt

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/api/ops/opstest"
	"github.com/raftmq/raftmq/proto"
)

// TestRoutes_PathSegments: a {wildcard} is one segment, unescaped: "%2F" is
// the vhost "/" and an empty segment the default exchange (neither of
// which Go's ServeMux alone would match), a name may hold slashes, a vhost
// "/" followed by a NUL stays a vhost of its own, and a trailing slash is
// taken as RabbitMQ takes it. What no route serves is
// RabbitMQ's 404, or its 405 where the path takes other methods, in its
// JSON shape.
func TestRoutes_PathSegments(t *testing.T) {
	node := opstest.AuthNode()
	node.Update(func(s *opstest.State) {
		s.VhostList = []*proto.VhostInfo{{Name: "/"}, {Name: "/\x00"}}
		s.QueueList = []*proto.QueueInfo{
			{Vhost: "/", Name: "a/b", EffectiveMessageTtl: -1, EffectiveExpires: -1},
			{Vhost: "/\x00", Name: "q", EffectiveMessageTtl: -1, EffectiveExpires: -1},
		}
	})
	m := New(Options{Ops: ops.New(ops.Deps{Node: unlockedView{node}})})
	serve := func(method, path string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, nil)
		r.SetBasicAuth("root", "pw-root")
		w := httptest.NewRecorder()
		m.ServeHTTP(w, r)
		return w
	}
	object := func(path string) map[string]any {
		t.Helper()
		w := serve("GET", path)
		var out map[string]any
		if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &out) != nil {
			t.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
		}
		return out
	}
	list := func(path string) []map[string]any {
		t.Helper()
		w := serve("GET", path)
		var out []map[string]any
		if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &out) != nil {
			t.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
		}
		return out
	}

	if q := object("/api/queues/%2F/a%2Fb"); q["vhost"] != "/" || q["name"] != "a/b" {
		t.Fatalf("queue %v", q)
	}
	if q := object("/api/queues/%2F%00/q"); q["vhost"] != "/\x00" || q["name"] != "q" {
		t.Fatalf("queue %v", q)
	}
	if qs := list("/api/queues/%2F"); len(qs) != 1 || qs[0]["name"] != "a/b" {
		t.Fatalf("queues of / %v", qs)
	}
	if qs := list("/api/queues/%2F/"); len(qs) != 1 || qs[0]["name"] != "a/b" {
		t.Fatalf("queues of / with a trailing slash %v", qs)
	}
	if v := object("/api/vhosts/%2F"); v["name"] != "/" {
		t.Fatalf("vhost %v", v)
	}
	// The default exchange's implicit binding, also found by its empty
	// name in the path.
	if bs := list("/api/queues/%2F/a%2Fb/bindings"); len(bs) != 1 || bs[0]["destination"] != "a/b" || bs[0]["vhost"] != "/" {
		t.Fatalf("bindings %v", bs)
	}
	if bs := list("/api/bindings/%2F/e//q/a%2Fb"); len(bs) != 1 || bs[0]["source"] != "" || bs[0]["destination"] != "a/b" {
		t.Fatalf("bindings from the default exchange %v", bs)
	}

	for _, c := range []struct {
		method, path string
		code         int
		err          string
	}{
		{"PATCH", "/api/queues/%2F/a%2Fb", http.StatusMethodNotAllowed, "Method Not Allowed"},
		{"POST", "/api/overview", http.StatusMethodNotAllowed, "Method Not Allowed"},
		{"GET", "/api/nope", http.StatusNotFound, "Object Not Found"},
		{"GET", "/api", http.StatusNotFound, "Object Not Found"},
		{"GET", "/api/queues/%2F/nope", http.StatusNotFound, "Object Not Found"},
		{"GET", "/api/vhosts/nope/permissions/extra", http.StatusNotFound, "Object Not Found"},
	} {
		w := serve(c.method, c.path)
		var body map[string]string
		if w.Code != c.code || json.Unmarshal(w.Body.Bytes(), &body) != nil || body["error"] != c.err {
			t.Errorf("%s %s: %d %s, want %d %q", c.method, c.path, w.Code, w.Body, c.code, c.err)
		}
	}
}
