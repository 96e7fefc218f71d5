package mgmt

import (
	"net/http"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// ---- runtime parameters, global parameters, vhost limits, topic
// permissions ----
//
// raftmq keeps the vhost limits (vhostLimits) and none of the others: it
// has no plugin that reads runtime parameters (federation, shovel) and no
// topic permissions. Reads answer in RabbitMQ's shapes with what there is
// (nothing, and the two global parameters every cluster has); writes are
// refused with a 400 that says so rather than accepted and dropped.

// unsupportedWrite refuses a write of something raftmq does not keep.
func unsupportedWrite(what string) *httpError {
	return badRequest("raftmq does not support %s", what)
}

// parameters serves /api/parameters[/component[/vhost[/name]]].
func (q *req) parameters() error {
	if !q.user.policymaker() && !q.user.monitor() {
		return notAuthorised("Not policymaker user")
	}
	component := q.arg("component")
	if q.has("vhost") {
		if _, err := q.vhostArg(); err != nil {
			return err
		}
	}
	switch q.r.Method {
	case http.MethodGet, http.MethodHead:
		if q.has("name") {
			return notFound()
		}
		q.list(nil)
		return nil
	case http.MethodPut:
		// RabbitMQ's answer for a component no plugin registered.
		return badRequest("Validation failed\n\ncomponent %s not found\n", component)
	case http.MethodDelete:
		return notFound()
	}
	return methodNotAllowed()
}

// globalParameters serves /api/global-parameters[/name]: the cluster's
// name and permanent id, as RabbitMQ keeps them there.
func (q *req) globalParameters() error {
	if !q.user.admin() {
		return notAuthorised("Not administrator user")
	}
	params := []map[string]any{
		{"name": "cluster_name", "value": q.m.cluster},
		{"name": "internal_cluster_id", "value": ops.ClusterPermanentID(q.m.cluster)},
	}
	name := q.arg("name")
	switch q.r.Method {
	case http.MethodGet, http.MethodHead:
		if name == "" {
			q.list(params)
			return nil
		}
		for _, p := range params {
			if p["name"] == name {
				q.ok(p)
				return nil
			}
		}
		return notFound()
	case http.MethodPut:
		if name == "" {
			return methodNotAllowed()
		}
		if name == "cluster_name" {
			return unsupportedWrite("renaming the cluster through the API: the cluster name is the nodes' configuration")
		}
		return unsupportedWrite("global parameters")
	case http.MethodDelete:
		if name == "" {
			return methodNotAllowed()
		}
		for _, p := range params {
			if p["name"] == name {
				return unsupportedWrite("global parameters")
			}
		}
		return notFound()
	}
	return methodNotAllowed()
}

// vhostLimits serves /api/vhost-limits[/vhost[/name]]: RabbitMQ's
// virtual host limits, kept in the log (fsm VhostLimits). A PUT sets one
// limit from {"value": n} and a DELETE clears one, keeping the others.
func (q *req) vhostLimits() error {
	vhost := q.arg("vhost")
	if q.has("vhost") {
		if _, err := q.vhostArg(); err != nil {
			return err
		}
	}
	name := q.arg("name")
	switch q.r.Method {
	case http.MethodGet, http.MethodHead:
		if !q.has("vhost") && !q.user.monitor() {
			return notAuthorised("Not monitor user")
		}
		if q.has("name") {
			return methodNotAllowed()
		}
		var out []map[string]any
		q.view(func(s ops.State) {
			for _, v := range s.VhostLimits(vhost) {
				out = append(out, vhostLimitsJSON(v))
			}
		})
		q.list(out)
		return nil
	case http.MethodPut, http.MethodDelete:
		if !q.user.admin() {
			return notAuthorised("Not administrator user")
		}
		if !fsm.KnownLimit(name) {
			return badRequest("Validation failed\n\nUnrecognised terms [{<<\"%s\">>}] in limits\n", name)
		}
		req := &proto.SetVhostLimitsRequest{Vhost: vhost, Clear: []string{name}}
		if q.r.Method == http.MethodPut {
			b, err := q.body()
			if err != nil {
				return err
			}
			if _, ok := b["value"]; !ok {
				return badRequest("Validation failed\n\nvalue is missing: the body is {\"value\": n}\n")
			}
			n, err := fieldInt(b, "value", 0)
			if err != nil {
				return err
			}
			req = &proto.SetVhostLimitsRequest{Vhost: vhost, Set: []*proto.VhostLimit{{Name: name, Value: n}}}
		}
		if _, err := q.m.ops.SetVhostLimits(q.ctx, req); err != nil {
			return err
		}
		q.noContent()
		return nil
	}
	return methodNotAllowed()
}

// vhostLimitsJSON is a vhost's limits in RabbitMQ's shape: {"vhost": v,
// "value": {"max-connections": n, ...}}.
func vhostLimitsJSON(v *proto.VhostLimitsInfo) map[string]any {
	value := map[string]any{}
	for _, l := range v.GetLimits() {
		value[l.GetName()] = l.GetValue()
	}
	return map[string]any{"vhost": v.GetVhost(), "value": value}
}

// topicPermissions serves /api/topic-permissions[/vhost/user]: raftmq
// checks no topic permissions, so there are none.
func (q *req) topicPermissions() error {
	if !q.user.admin() {
		return notAuthorised("Not administrator user")
	}
	if q.has("vhost") {
		if _, err := q.vhostArg(); err != nil {
			return err
		}
	}
	switch q.r.Method {
	case http.MethodGet, http.MethodHead:
		if q.has("user") {
			return notFound()
		}
		q.list(nil)
		return nil
	case http.MethodPut:
		return unsupportedWrite("topic permissions: its topic exchanges check only the write and read permissions")
	case http.MethodDelete:
		// None is ever set, and RabbitMQ answers clearing topic
		// permissions that are not set with 404.
		return notFound()
	}
	return methodNotAllowed()
}
