package api

import (
	"context"
	"net/http"
	"slices"

	"github.com/raftmq/raftmq/proto"
)

// Resources are a node's resource alarms and what the disk alarm
// compares, as /api/nodes, the alarm health checks and the metrics show
// them.
type Resources struct {
	MemAlarm  bool
	DiskAlarm bool
	// DiskFree is the free space of the data dir at the last check (0
	// before it), DiskFreeLimit the --disk-free-limit.
	DiskFree, DiskFreeLimit uint64
}

// Alarms names the raised alarms as the admin API reports them.
func (r Resources) Alarms() []string {
	var out []string
	if r.DiskAlarm {
		out = append(out, "disk")
	}
	if r.MemAlarm {
		out = append(out, "memory")
	}
	return out
}

// alarmResource is RabbitMQ's name of an alarm's resource in the health
// checks' answers.
func alarmResource(a string) string {
	if a == "disk" {
		return "disk space"
	}
	return a
}

func (s *AdminServer) nodeResources() Resources {
	if s.resources == nil {
		return Resources{}
	}
	return s.resources()
}

// nodeAlarm is one raised alarm of one node.
type nodeAlarm struct{ node, resource string }

// nodeStatuses is every alive member's ClusterStatus, by node id: this
// node's own, the others' asked in parallel (each within the peer
// timeout). A member that does not answer is left out and logged, as
// ListConnections leaves it out.
func (s *AdminServer) nodeStatuses(ctx context.Context) map[string]*proto.ClusterStatusResponse {
	out := map[string]*proto.ClusterStatusResponse{s.node.NodeID(): s.clusterStatus()}
	askPeers(ctx, s, "node status", func(ctx context.Context, c proto.AdminClient) (*proto.ClusterStatusResponse, error) {
		return c.ClusterStatus(ctx, &proto.ClusterStatusRequest{})
	}, func(id string, r *proto.ClusterStatusResponse) { out[id] = r })
	return out
}

// alarmsCheck is /api/health/checks/alarms (every node's alarms) and
// local-alarms (this node's), in RabbitMQ's shapes.
func (q *req) alarmsCheck(local bool) error {
	var alarms []nodeAlarm
	where := "in the cluster"
	if local {
		where = "on the node"
		for _, a := range q.m.admin.nodeResources().Alarms() {
			alarms = append(alarms, nodeAlarm{q.m.node.NodeID(), a})
		}
	} else {
		sts := q.m.admin.nodeStatuses(q.ctx)
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

// clockCheck is /api/health/checks/clocks (every node's wall clock) and
// local-clock (this node's), raftmq's own: a clock further from the
// voters' than --max-clock-offset fails it, with the reason per node. Such
// a node does not lead; log time does not follow its clock either way.
func (q *req) clockCheck(local bool) error {
	problems := map[string]string{}
	if local {
		if p := clockProblem(q.m.node); p != "" {
			problems[q.m.node.NodeID()] = p
		}
	} else {
		for id, st := range q.m.admin.nodeStatuses(q.ctx) {
			if p := st.GetClockProblem(); p != "" {
				problems[id] = p
			}
		}
	}
	if len(problems) == 0 {
		q.ok(map[string]string{"status": "ok"})
		return nil
	}
	ids := make([]string, 0, len(problems))
	for id := range problems {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	list := make([]map[string]string, 0, len(ids))
	for _, id := range ids {
		list = append(list, map[string]string{"node": id, "reason": problems[id]})
	}
	writeJSON(q.w, http.StatusServiceUnavailable, map[string]any{"status": "failed",
		"reason": ids[0] + ": " + problems[ids[0]], "clocks": list})
	return nil
}
