package mgmt

import (
	"net/http"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/proto"
)

func (q *req) vhostJSON(s ops.State, v *proto.VhostInfo) map[string]any {
	var ready, unacked uint64
	for _, x := range s.Queues(v.GetName()) {
		ready += x.GetReady()
		unacked += x.GetUnacked()
	}
	cs := map[string]string{}
	for _, mb := range q.m.node.Members() {
		st := "running"
		if h := mb.GetHealth(); h != "" && h != "alive" {
			st = "stopped"
		}
		cs[mb.GetId()] = st
	}
	return map[string]any{
		"name": v.GetName(), "description": v.GetDescription(), "tags": []string{}, "tracing": false,
		"default_queue_type": "undefined", "cluster_state": cs,
		"metadata": map[string]any{"description": v.GetDescription(), "tags": []string{}},
		"messages": ready + unacked, "messages_details": rate(),
		"messages_ready": ready, "messages_ready_details": rate(),
		"messages_unacknowledged": unacked, "messages_unacknowledged_details": rate(),
	}
}

func (q *req) vhosts() error {
	name := q.arg("vhost")
	switch q.r.Method {
	case http.MethodGet:
		var out []map[string]any
		q.view(func(s ops.State) {
			for _, v := range s.Vhosts() {
				if q.user.seesVhost(v.GetName()) && (name == "" || v.GetName() == name) {
					out = append(out, q.vhostJSON(s, v))
				}
			}
		})
		if name != "" {
			if len(out) == 0 {
				return notFound()
			}
			q.ok(out[0])
			return nil
		}
		q.list(out)
		return nil
	case http.MethodPut:
		if !q.user.admin() {
			return notAuthorised("Not administrator user")
		}
		b, err := q.body()
		if err != nil {
			return err
		}
		desc, err := fieldString(b, "description", "")
		if err != nil {
			return err
		}
		existed := false
		q.view(func(s ops.State) {
			for _, v := range s.Vhosts() {
				existed = existed || v.GetName() == name
			}
		})
		if _, err := q.m.ops.AddVhost(q.ctx, &proto.AddVhostRequest{Name: name, Description: desc}); err != nil {
			return err
		}
		q.created(existed)
		return nil
	case http.MethodDelete:
		if !q.user.admin() {
			return notAuthorised("Not administrator user")
		}
		if _, err := q.m.ops.DeleteVhost(q.ctx, &proto.DeleteVhostRequest{Name: name}); err != nil {
			return err
		}
		q.noContent()
		return nil
	}
	return methodNotAllowed()
}
