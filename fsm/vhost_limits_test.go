package fsm_test

import (
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

func limitsCmd(vhost string, replace bool, clear []string, kv ...any) *proto.Command {
	c := &proto.VhostLimits{Vhost: vhost, Replace: replace, Clear: clear}
	for i := 0; i < len(kv); i += 2 {
		c.Set = append(c.Set, &proto.VhostLimit{Name: kv[i].(string), Value: int64(kv[i+1].(int))})
	}
	return &proto.Command{Cmd: &proto.Command_VhostLimits{VhostLimits: c}}
}

// limitsOf renders a vhost's limits as name=value pairs in name order.
func limitsOf(m *fsm.Machine, vhost string) map[string]int64 {
	out := map[string]int64{}
	for _, v := range m.VhostLimits(vhost) {
		for _, l := range v.GetLimits() {
			out[l.GetName()] = l.GetValue()
		}
	}
	return out
}

func sameLimits(t *testing.T, got map[string]int64, want ...any) {
	t.Helper()
	if len(got) != len(want)/2 {
		t.Fatalf("limits %v, want %v", got, want)
	}
	for i := 0; i < len(want); i += 2 {
		if v, ok := got[want[i].(string)]; !ok || v != int64(want[i+1].(int)) {
			t.Fatalf("limits %v, want %v", got, want)
		}
	}
}

// set_vhost_limits replaces the whole set; the management API's PUT and
// DELETE of one limit keep the others; an empty replace clears them all.
func TestVhostLimits_SetMergeClear(t *testing.T) {
	m := fsmtest.New(t)
	if l := m.VhostLimits(""); len(l) != 0 {
		t.Fatalf("a new vhost has limits: %v", l)
	}
	applyOK(t, m, 2, limitsCmd("/", true, nil, "max-connections", 256, "max-queues", 1024))
	sameLimits(t, limitsOf(m, "/"), "max-connections", 256, "max-queues", 1024)
	applyOK(t, m, 3, limitsCmd("/", true, nil, "max-queues", 5))
	sameLimits(t, limitsOf(m, "/"), "max-queues", 5)
	applyOK(t, m, 4, limitsCmd("/", false, nil, "max-connections", 3))
	sameLimits(t, limitsOf(m, "/"), "max-connections", 3, "max-queues", 5)
	applyOK(t, m, 5, limitsCmd("/", false, []string{"max-queues"}))
	sameLimits(t, limitsOf(m, "/"), "max-connections", 3)
	if n, ok := m.VhostLimit("/", "max-connections"); !ok || n != 3 {
		t.Fatalf("VhostLimit max-connections = %d, %v", n, ok)
	}
	applyOK(t, m, 6, limitsCmd("/", true, nil))
	if l := m.VhostLimits(""); len(l) != 0 {
		t.Fatalf("limits after clearing: %v", l)
	}
	r, _ := fsmtest.One(t, m, 7, limitsCmd("nosuch", true, nil, "max-queues", 1))
	if r.GetCode() != 404 || r.GetText() != "NOT_FOUND - no vhost 'nosuch'" {
		t.Fatalf("limits of a missing vhost: %v", r)
	}
	// A vhost deleted and created again has no limits.
	applyOK(t, m, 8, &proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "v"}}},
		limitsCmd("v", true, nil, "max-queues", 1),
		&proto.Command{Cmd: &proto.Command_VhostDelete{VhostDelete: &proto.VhostDelete{Name: "v"}}},
		&proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "v"}}})
	if l := m.VhostLimits("v"); len(l) != 0 {
		t.Fatalf("a recreated vhost kept its limits: %v", l)
	}
}

// max-queues refuses a new queue once the vhost holds that many, with
// RabbitMQ's code and text; a redeclare and a passive declare pass; 0
// refuses every queue; a negative value and a cleared limit refuse none.
func TestVhostLimits_MaxQueues(t *testing.T) {
	m := fsmtest.New(t)
	applyOK(t, m, 2, limitsCmd("/", true, nil, "max-queues", 2))
	applyOK(t, m, 3, declare("q1", nil), declare("q2", nil))
	r, _ := fsmtest.One(t, m, 4, declare("q3", nil))
	if r.GetCode() != 406 || r.GetText() != "PRECONDITION_FAILED - cannot declare queue 'q3': queue limit in vhost '/' (2) is reached" {
		t.Fatalf("declare past max-queues: %v", r)
	}
	if _, ok := m.Queue("/", "q3"); ok {
		t.Fatal("the refused queue exists")
	}
	passive := declare("q1", nil)
	passive.GetQueueDeclare().Passive = true
	applyOK(t, m, 5, declare("q1", nil), passive)
	r, _ = fsmtest.One(t, m, 6, declare("", nil))
	if r.GetCode() != 406 {
		t.Fatalf("server-named declare past max-queues: %v", r)
	}
	applyOK(t, m, 7, &proto.Command{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{Vhost: "/", Name: "q1"}}}, declare("q3", nil))

	applyOK(t, m, 8, limitsCmd("/", false, nil, "max-queues", 0))
	if r, _ := fsmtest.One(t, m, 9, declare("q4", nil)); r.GetCode() != 406 || r.GetText() != "PRECONDITION_FAILED - cannot declare queue 'q4': queue limit in vhost '/' (0) is reached" {
		t.Fatalf("declare at max-queues 0: %v", r)
	}
	applyOK(t, m, 10, limitsCmd("/", false, nil, "max-queues", -1), declare("q4", nil))
	applyOK(t, m, 11, limitsCmd("/", false, nil, "max-queues", 0), limitsCmd("/", false, []string{"max-queues"}), declare("q5", nil))
	// Other vhosts are not limited by "/"'s limit.
	applyOK(t, m, 12, limitsCmd("/", false, nil, "max-queues", 0),
		&proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "v"}}},
		&proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "v", Name: "q"}}})
}

// The limits are state: a snapshot carries them (and the declare refusal
// with them), the digest covers them, and a snapshot in the format before
// them restores with none.
func TestVhostLimits_SnapshotAndDigest(t *testing.T) {
	m := fsmtest.New(t)
	plain := m.Digest()
	applyOK(t, m, 2, limitsCmd("/", true, nil, "max-connections", 7, "max-queues", 1), declare("q1", nil))
	limited := m.Digest()
	if limited == plain {
		t.Fatal("the digest does not cover the limits")
	}
	n := roundTrip(t, m)
	sameLimits(t, limitsOf(n, "/"), "max-connections", 7, "max-queues", 1)
	if r, _ := fsmtest.One(t, n, 3, declare("q2", nil)); r.GetCode() != 406 {
		t.Fatalf("restored machine let a queue past max-queues: %v", r)
	}
	applyOK(t, m, 3, limitsCmd("/", false, nil, "max-queues", 2))
	if m.Digest() == limited {
		t.Fatal("the digest does not change with a limit's value")
	}

	// Format 9, the one before limits, has none.
	b, err := fsm.SnapshotAs(m, 9, 11)
	if err != nil {
		t.Fatal(err)
	}
	old := restoreBytes(t, b)
	if l := old.VhostLimits(""); len(l) != 0 {
		t.Fatalf("format 9 restored with limits: %v", l)
	}
	applyOK(t, old, 4, declare("q2", nil), declare("q3", nil))
}

// Below level 12 a snapshot is written in format 9, which the release
// before reads; a node at level 12 writes the limits.
func TestVhostLimits_SnapshotFormatFollowsLevel(t *testing.T) {
	old := fsmtest.NewAt(t, 11)
	applyOK(t, old, 2, declare("q1", nil))
	b, _ := snapshotBytes(t, old)
	if b[4] != 9 {
		t.Fatalf("a level 11 state wrote snapshot format %d, want 9", b[4])
	}
	m := fsmtest.NewAt(t, 12)
	applyOK(t, m, 2, limitsCmd("/", true, nil, "max-queues", 1))
	if b, _ := snapshotBytes(t, m); b[4] != 10 {
		t.Fatalf("a level 12 state wrote snapshot format %d, want 10", b[4])
	}
}

// The leader proposes VhostLimits only once every server applies level 12,
// and refuses a limit raftmq does not know.
func TestVhostLimits_Validate(t *testing.T) {
	c := limitsCmd("/", true, nil, "max-queues", 1)
	if got := fsm.CommandProtocol(c); got != 12 {
		t.Fatalf("CommandProtocol = %d, want 12", got)
	}
	if err := fsm.Validate(c, fsm.Limits{}); err != nil {
		t.Fatal(err)
	}
	err := fsm.Validate(limitsCmd("/", false, nil, "max-channels", 1), fsm.Limits{})
	if err == nil || err.Error() != "PRECONDITION_FAILED - unknown vhost limit 'max-channels'" {
		t.Fatalf("unknown limit: %v", err)
	}
	if err := fsm.Validate(limitsCmd("", true, nil), fsm.Limits{}); err == nil {
		t.Fatal("a command without a vhost passed")
	}
}

// A log at level 11 declares as before; across its SetProtocol to 12 the
// limits are set and refuse a declare, and a replica replaying the whole
// log agrees with one restored from a snapshot after any entry (format 9
// before the SetProtocol, 10 after).
func TestVhostLimits_ReplayAcrossSetProtocol(t *testing.T) {
	var log [][]*proto.Command
	add := func(c ...*proto.Command) { log = append(log, c) }
	add(declare("q1", nil), declare("q2", nil))
	add(fsmtest.SetProtocol(fsm.Protocol))
	add(limitsCmd("/", true, nil, "max-queues", 3, "max-connections", 1))
	add(declare("q3", nil), declare("q4", nil))
	add(limitsCmd("/", false, []string{"max-queues"}), declare("q4", nil))
	replay := func(restoreAt int) (*fsm.Machine, [][]*proto.Result) { return replayLog(t, 11, log, restoreAt) }
	a, res := replay(-1)
	mustOK(t, res[0][0])
	mustOK(t, res[0][1])
	mustOK(t, res[3][0])
	if r := res[3][1]; r.GetCode() != 406 {
		t.Fatalf("declare past max-queues: %v", r)
	}
	mustOK(t, res[4][1])
	sameLimits(t, limitsOf(a, "/"), "max-connections", 1)
	for at := range log {
		b, _ := replay(at)
		if a.Digest() != b.Digest() {
			t.Fatalf("restored after entry %d: digests differ", at)
		}
	}
}
