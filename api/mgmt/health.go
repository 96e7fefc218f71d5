package mgmt

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/proto"
)

func (q *req) health() error {
	okJSON := map[string]string{"status": "ok"}
	failed := func(reason string) error {
		writeJSON(q.w, http.StatusServiceUnavailable, map[string]string{"status": "failed", "reason": reason})
		return nil
	}
	check := q.arg("check")
	if q.arg("port") != "" {
		check = "port-listener"
	}
	switch check {
	case "alarms", "local-alarms":
		return q.alarmsCheck(check == "local-alarms")
	case "clocks", "local-clock":
		return q.clockCheck(check == "local-clock")
	case "virtual-hosts":
	case "ready-to-serve-clients":
		if reason := ops.NotReady(q.m.node); reason != "" {
			return failed(reason)
		}
	case "node-is-quorum-critical":
		voters, alive := 0, 0
		for _, mb := range q.m.node.Members() {
			if strings.EqualFold(mb.GetSuffrage(), "voter") {
				voters++
				if mb.GetHealth() == "" || mb.GetHealth() == "alive" {
					alive++
				}
			}
		}
		if voters > 1 && alive-1 < voters/2+1 {
			return failed(fmt.Sprintf("stopping this node would leave %d of %d raft voters, fewer than a majority", alive-1, voters))
		}
	case "port-listener":
		port := q.arg("port")
		for _, mb := range q.m.node.Members() {
			if mb.GetId() == q.m.node.NodeID() && (portOf(mb.GetAmqpAddr()) == port || portOf(mb.GetGrpcAddr()) == port) {
				q.ok(okJSON)
				return nil
			}
		}
		if portOf(q.m.addr) == port {
			q.ok(okJSON)
			return nil
		}
		return failed(fmt.Sprintf("no listener on port %s", port))
	default:
		return notFound()
	}
	q.ok(okJSON)
	return nil
}

// aliveness declares the queue aliveness-test in the vhost, publishes a
// message to it and takes it back, all through the log, as RabbitMQ's
// check does.
func (q *req) aliveness() error {
	vhost, err := q.vhostArg()
	if err != nil {
		return err
	}
	if e := q.user.may(vhost, permConfigure, "queue", "aliveness-test"); e != nil {
		return e
	}
	ctx, cancel := context.WithTimeout(q.ctx, 10*time.Second)
	defer cancel()
	if _, err := q.m.ops.DeclareQueue(ctx, &proto.QueueDeclare{Vhost: vhost, Name: "aliveness-test"}); err != nil {
		return err
	}
	if _, err := q.m.ops.Publish(ctx, &proto.Publish{Vhost: vhost, RoutingKey: "aliveness-test", Body: []byte("test_message")}); err != nil {
		return err
	}
	msgs, err := q.m.ops.GetMessages(ctx, vhost, "aliveness-test", 1, false)
	if err != nil {
		return err
	}
	if len(msgs) == 0 {
		writeJSON(q.w, http.StatusServiceUnavailable, map[string]string{"status": "failed", "reason": "the test message did not come back"})
		return nil
	}
	q.ok(map[string]string{"status": "ok"})
	return nil
}

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

// clockCheck is /api/health/checks/clocks (every node's wall clock) and
// local-clock (this node's), raftmq's own: a clock further from the
// voters' than --max-clock-offset fails it, with the reason per node. Such
// a node does not lead; log time does not follow its clock either way.
func (q *req) clockCheck(local bool) error {
	problems := map[string]string{}
	if local {
		if p := ops.ClockProblem(q.m.node); p != "" {
			problems[q.m.node.NodeID()] = p
		}
	} else {
		for id, st := range q.m.ops.NodeStatuses(q.ctx) {
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

// leadersCheck is RabbitMQ 4.1's quorum-queues-without-elected-leaders
// check: the queues (of the vhost, or of every vhost the user sees; whose
// name matches the pattern, default every name) whose Raft group has no
// leader this node knows. Every raftmq queue is replicated by its group,
// so each counts, as a quorum queue does in RabbitMQ.
func (q *req) leadersCheck() error {
	vhost, err := q.vhostScope()
	if err != nil {
		return err
	}
	pattern := ".*"
	if q.has("pattern") {
		pattern = q.arg("pattern")
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return badRequest("invalid queue name pattern: %v", err)
	}
	leaderless := map[string]bool{}
	for _, g := range q.m.node.Groups() {
		if g.Leader == "" {
			leaderless[g.ID] = true
		}
	}
	list := []map[string]string{}
	if len(leaderless) > 0 {
		q.view(func(s ops.State) {
			for _, x := range s.Queues(vhost) {
				if q.user.seesVhost(x.GetVhost()) && re.MatchString(x.GetName()) &&
					leaderless[x.GetRaftGroup()] {
					list = append(list, map[string]string{
						"readable_name": fmt.Sprintf("queue '%s' in vhost '%s'", x.GetName(), x.GetVhost()),
						"name":          x.GetName(), "virtual_host": x.GetVhost(), "type": "rabbit_quorum_queue"})
				}
			}
		})
	}
	if len(list) == 0 {
		q.ok(map[string]string{"status": "ok"})
		return nil
	}
	writeJSON(q.w, http.StatusServiceUnavailable, map[string]any{"status": "failed",
		"reason": "Detected quorum queues without an elected leader", "queues": list})
	return nil
}
