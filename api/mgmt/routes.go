package mgmt

import (
	"net/http"

	"github.com/raftmq/raftmq/api/ops"
)

// routes are RabbitMQ's management paths as the standard library's
// method-and-path patterns. A {wildcard} is one path segment, read with
// q.arg, unescaped: "%2F" is the vhost "/", and a name holding a slash
// travels as "%2F" inside its segment. GET patterns answer HEAD too.
func (m *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	handle := func(fn func(*req) error, patterns ...string) {
		h := m.serve(fn)
		for _, p := range patterns {
			mux.Handle(p, h)
		}
	}
	handle((*req).overview, "GET /api/overview")
	handle(func(q *req) error { q.ok(map[string]string{"name": q.m.cluster}); return nil }, "GET /api/cluster-name")
	handle(func(q *req) error { q.ok(map[string]any{"name": q.user.name, "tags": nonNil(q.user.tags)}); return nil }, "GET /api/whoami")
	handle(func(q *req) error { q.ok([]any{}); return nil }, "GET /api/extensions")
	handle((*req).nodes, "GET /api/nodes", "GET /api/nodes/{node}")

	handle((*req).vhosts, "GET /api/vhosts", "GET /api/vhosts/{vhost}", "PUT /api/vhosts/{vhost}", "DELETE /api/vhosts/{vhost}")
	handle((*req).permissionsOf, "GET /api/vhosts/{vhost}/permissions", "GET /api/users/{user}/permissions")
	handle((*req).noTopicPermissions, "GET /api/vhosts/{vhost}/topic-permissions", "GET /api/users/{user}/topic-permissions")
	handle((*req).users, "GET /api/users", "GET /api/users/{user}", "PUT /api/users/{user}", "DELETE /api/users/{user}")
	handle((*req).permissions, "GET /api/permissions",
		"GET /api/permissions/{vhost}/{user}", "PUT /api/permissions/{vhost}/{user}", "DELETE /api/permissions/{vhost}/{user}")

	handle((*req).queues, "GET /api/queues", "GET /api/queues/{vhost}")
	handle((*req).queue, "GET /api/queues/{vhost}/{name}", "PUT /api/queues/{vhost}/{name}", "DELETE /api/queues/{vhost}/{name}")
	handle((*req).queuePurge, "DELETE /api/queues/{vhost}/{name}/contents")
	handle((*req).queueGet, "POST /api/queues/{vhost}/{name}/get")
	handle((*req).queueBindings, "GET /api/queues/{vhost}/{name}/bindings")
	handle((*req).exchanges, "GET /api/exchanges", "GET /api/exchanges/{vhost}")
	handle((*req).exchange, "GET /api/exchanges/{vhost}/{name}", "PUT /api/exchanges/{vhost}/{name}", "DELETE /api/exchanges/{vhost}/{name}")
	handle((*req).publish, "POST /api/exchanges/{vhost}/{name}/publish")
	handle((*req).exchangeBindings, "GET /api/exchanges/{vhost}/{name}/bindings/{direction}")
	handle((*req).delayedMessages, "GET /api/exchanges/{vhost}/{name}/delayed", "DELETE /api/exchanges/{vhost}/{name}/delayed")
	handle((*req).delayedMessage, "DELETE /api/exchanges/{vhost}/{name}/delayed/{seq}")
	handle((*req).bindings, "GET /api/bindings", "GET /api/bindings/{vhost}")
	handle((*req).binding, "GET /api/bindings/{vhost}/e/{source}/{kind}/{dest}", "POST /api/bindings/{vhost}/e/{source}/{kind}/{dest}",
		"GET /api/bindings/{vhost}/e/{source}/{kind}/{dest}/{props}", "DELETE /api/bindings/{vhost}/e/{source}/{kind}/{dest}/{props}")

	handle((*req).connections, "GET /api/connections", "GET /api/connections/{name}", "DELETE /api/connections/{name}")
	handle((*req).connectionChannels, "GET /api/connections/{name}/channels")
	handle((*req).channels, "GET /api/channels")
	handle((*req).consumers, "GET /api/consumers", "GET /api/consumers/{vhost}")

	handle((*req).parameters, "GET /api/parameters", "GET /api/parameters/{component}", "GET /api/parameters/{component}/{vhost}",
		"GET /api/parameters/{component}/{vhost}/{name}", "PUT /api/parameters/{component}/{vhost}/{name}", "DELETE /api/parameters/{component}/{vhost}/{name}")
	handle((*req).globalParameters, "GET /api/global-parameters",
		"GET /api/global-parameters/{name}", "PUT /api/global-parameters/{name}", "DELETE /api/global-parameters/{name}")
	handle((*req).vhostLimits, "GET /api/vhost-limits", "GET /api/vhost-limits/{vhost}", "GET /api/vhost-limits/{vhost}/{name}",
		"PUT /api/vhost-limits/{vhost}/{name}", "DELETE /api/vhost-limits/{vhost}/{name}")
	handle((*req).topicPermissions, "GET /api/topic-permissions", "GET /api/topic-permissions/{vhost}",
		"GET /api/topic-permissions/{vhost}/{user}", "PUT /api/topic-permissions/{vhost}/{user}", "DELETE /api/topic-permissions/{vhost}/{user}")
	for _, kind := range []string{"policies", "operator-policies"} {
		operator := kind == "operator-policies"
		handle(func(q *req) error { return q.policies(operator) }, "GET /api/"+kind, "GET /api/"+kind+"/{vhost}",
			"GET /api/"+kind+"/{vhost}/{name}", "PUT /api/"+kind+"/{vhost}/{name}", "DELETE /api/"+kind+"/{vhost}/{name}")
	}

	handle((*req).health, "GET /api/health/checks/{check}", "GET /api/health/checks/port-listener/{port}")
	leaders := "GET /api/health/checks/quorum-queues-without-elected-leaders/"
	handle((*req).leadersCheck, leaders+"all-vhosts", leaders+"vhost/{vhost}",
		leaders+"all-vhosts/pattern/{pattern}", leaders+"vhost/{vhost}/pattern/{pattern}")
	handle((*req).aliveness, "GET /api/aliveness-test/{vhost}")
	handle((*req).definitions, "GET /api/definitions", "POST /api/definitions", "GET /api/definitions/{vhost}", "POST /api/definitions/{vhost}")

	// Anything else under /api is RabbitMQ's 404, or its 405 where the
	// path takes other methods.
	unrouted := m.serve(func(q *req) error {
		for _, method := range []string{http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete} {
			probe := q.r.Clone(q.ctx)
			probe.Method = method
			if _, p := mux.Handler(probe); p != "" && p != "/api/" && p != "/api" {
				return methodNotAllowed()
			}
		}
		return notFound()
	})
	mux.Handle("/api/", unrouted)
	mux.Handle("/api", unrouted)
	return mux
}

// object is the vhost (checked as vhostArg does) and the name of the
// queue or exchange the path names.
func (q *req) object() (vhost, name string, err error) {
	vhost, err = q.vhostArg()
	return vhost, q.arg("name"), err
}

// arg is the path's {name} segment, unescaped ("" when the route has none),
// without the NUL routable added.
func (q *req) arg(name string) string {
	v := q.r.PathValue(name)
	if v != "" && v != "/" && nulPadded(v) {
		return v[:len(v)-1]
	}
	return v
}

// has reports whether the route has a {name} segment (which may be empty).
func (q *req) has(name string) bool { return q.r.PathValue(name) != "" }

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// view runs fn on the applied state.
func (q *req) view(fn func(ops.State)) { q.m.node.View(fn) }

// vhostScope is the vhost a listing is limited to: the path's {vhost}
// when it has one (checked as vhostArg does), "" for every vhost the user
// sees.
func (q *req) vhostScope() (string, error) {
	if !q.has("vhost") {
		return "", nil
	}
	return q.vhostArg()
}

// vhostArg returns the path's {vhost}, checking that it exists and that
// the user sees it: 404 otherwise, as RabbitMQ answers for both.
func (q *req) vhostArg() (string, error) {
	v := q.arg("vhost")
	exists := false
	q.view(func(s ops.State) {
		for _, x := range s.Vhosts() {
			if x.GetName() == v {
				exists = true
			}
		}
	})
	if !exists {
		return "", notFound()
	}
	if !q.user.seesVhost(v) {
		return "", notAuthorised("Not authorised to access virtual host")
	}
	return v, nil
}
