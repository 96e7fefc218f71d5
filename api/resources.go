package api

import (
	"net/http"
	"slices"
)

// alarmResource is RabbitMQ's name of an alarm's resource in the health
// checks' answers.
func alarmResource(a string) string {
	if a == "disk" {
		return "disk space"
	}
	return a
}

// nodeAlarm is one raised alarm of one node.
type nodeAlarm struct{ node, resource string }

// alarmsCheck is /api/health/checks/alarms (every node's alarms) and
// local-alarms (this node's), in RabbitMQ's shapes.
func (q *req) alarmsCheck(local bool) error {
	var alarms []nodeAlarm
	where := "in the cluster"
	if local {
		where = "on the node"
		for _, a := range q.m.ops.Resources().Alarms() {
			alarms = append(alarms, nodeAlarm{q.m.node.NodeID(), a})
		}
	} else {
		sts := q.m.ops.NodeStatuses(q.ctx)
		ids := make([]string, 0, len(sts))
		for id := range sts {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			for _, a := range sts[id].GetAlarms() {
				alarms = append(alarms, nodeAlarm{id, a})
			}
		}
	}
	if len(alarms) == 0 {
		q.ok(map[string]string{"status": "ok"})
		return nil
	}
	list := make([]map[string]string, 0, len(alarms))
	for _, a := range alarms {
		list = append(list, map[string]string{"node": a.node, "resource": alarmResource(a.resource)})
	}
	writeJSON(q.w, http.StatusServiceUnavailable, map[string]any{"status": "failed",
		"reason": "There are alarms in effect " + where, "alarms": list})
	return nil
}
