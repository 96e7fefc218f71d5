package mgmt

import (
	"net/http"

	"github.com/raftmq/raftmq/api/ops"
)

// route dispatches on the first path segment.
func (q *req) route() error {
	switch q.seg(0) {
	case "overview":
		return q.get(q.overview)
	case "cluster-name":
		return q.get(func() error { q.ok(map[string]string{"name": q.m.cluster}); return nil })
	case "whoami":
		return q.get(func() error { q.ok(map[string]any{"name": q.user.name, "tags": nonNil(q.user.tags)}); return nil })
	case "extensions":
		return q.get(func() error { q.ok([]any{}); return nil })
	case "nodes":
		return q.nodes()
	case "vhosts":
		return q.vhosts()
	case "users":
		return q.users()
	case "permissions":
		return q.permissions()
	case "queues":
		return q.queues()
	case "exchanges":
		return q.exchanges()
	case "bindings":
		return q.bindings()
	case "connections":
		return q.connections()
	case "channels":
		return q.get(q.channels)
	case "consumers":
		return q.get(q.consumers)
	case "parameters":
		return q.parameters()
	case "global-parameters":
		return q.globalParameters()
	case "vhost-limits":
		return q.vhostLimits()
	case "topic-permissions":
		return q.topicPermissions()
	case "policies":
		return q.policies(false)
	case "operator-policies":
		return q.policies(true)
	case "health":
		return q.health()
	case "aliveness-test":
		return q.aliveness()
	case "definitions":
		return q.definitions()
	}
	return notFound()
}

func (q *req) get(fn func() error) error {
	if q.r.Method != http.MethodGet && q.r.Method != http.MethodHead {
		return methodNotAllowed()
	}
	return fn()
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// view runs fn on the applied state.
func (q *req) view(fn func(ops.State)) { q.m.node.View(fn) }

// vhostScope is the vhost a listing is limited to: segment 1 when the path
// has one (checked as vhostArg does), "" for every vhost the user sees.
func (q *req) vhostScope() (string, error) {
	if len(q.segs) < 2 {
		return "", nil
	}
	return q.vhostArg(1)
}

// vhostArg returns the vhost of segment i, checking that it exists and that
// the user sees it: 404 otherwise, as RabbitMQ answers for both.
func (q *req) vhostArg(i int) (string, error) {
	v := q.seg(i)
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
