package mgmt

import (
	"net/http"

	"github.com/raftmq/raftmq/api/ops"
)

// ---- runtime parameters, global parameters, vhost limits, topic
// permissions ----
//
// raftmq stores none of these: it has no plugin that reads runtime
// parameters (federation, shovel), no per-vhost limits and no topic
// permissions. Reads answer in RabbitMQ's shapes with what there is
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

// vhostLimits serves /api/vhost-limits[/vhost[/name]]: no vhost has
// limits (--max-queues-per-vhost is each node's configuration).
func (q *req) vhostLimits() error {
	if q.has("vhost") {
		if _, err := q.vhostArg(); err != nil {
			return err
		}
	}
	switch q.r.Method {
	case http.MethodGet, http.MethodHead:
		if !q.has("vhost") && !q.user.monitor() {
			return notAuthorised("Not monitor user")
		}
		q.list(nil)
		return nil
	case http.MethodPut:
		if !q.user.admin() {
			return notAuthorised("Not administrator user")
		}
		return unsupportedWrite("virtual host limits (--max-queues-per-vhost limits the queues of every vhost on a node)")
	case http.MethodDelete:
		if !q.user.admin() {
			return notAuthorised("Not administrator user")
		}
		// As RabbitMQ answers clearing a limit that is not set.
		q.noContent()
		return nil
	}
	return methodNotAllowed()
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
		// As RabbitMQ answers clearing topic permissions that are not set.
		q.noContent()
		return nil
	}
	return methodNotAllowed()
}
