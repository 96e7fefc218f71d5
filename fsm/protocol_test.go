package fsm_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

func tagsOf(rec *fsmtest.Recorder) []uint64 {
	var out []uint64
	for _, d := range rec.Deliveries {
		out = append(out, d.DeliveryTag)
	}
	return out
}

// renumbered delivers three messages on ch1, declares ch1's node down and
// consumes again under the same channel's name: the tags before and
// after.
func renumbered(t *testing.T, m *fsm.Machine) (before, after []uint64) {
	t.Helper()
	fsmtest.One(t, m, 2, declare("q", nil))
	fsmtest.One(t, m, 2, consume("q", "c", ch1, 10))
	for range 3 {
		_, rec := fsmtest.One(t, m, 3, publish("", "q", "x", nil))
		before = append(before, tagsOf(rec)...)
	}
	fsmtest.One(t, m, 4, nodeDown(ch1.GetNode()))
	_, rec := fsmtest.One(t, m, 5, consume("q", "c", ch1, 10))
	after = tagsOf(rec)
	_, rec = fsmtest.One(t, m, 6, publish("", "q", "y", nil))
	return before, append(after, tagsOf(rec)...)
}

// A log that never raised its level numbers deliveries as the first
// release did: a channel created again under a removed one's name starts
// from 1. From level 2 it starts above the removed channel's tags.
func TestProtocol_TagNumberingFollowsTheLevel(t *testing.T) {
	for _, tc := range []struct {
		level uint32
		after []uint64
	}{
		{1, []uint64{1, 2, 3, 4}},
		{2, []uint64{4, 5, 6, 7}},
	} {
		t.Run(fmt.Sprint("level ", tc.level), func(t *testing.T) {
			m := fsmtest.NewAt(t, tc.level)
			before, after := renumbered(t, m)
			if !slices.Equal(before, []uint64{1, 2, 3}) || !slices.Equal(after, tc.after) {
				t.Fatalf("tags %v then %v, want [1 2 3] then %v", before, after, tc.after)
			}
		})
	}
}

// SetProtocol raises the level and never lowers it; a level above this
// binary's is refused and changes nothing; the level is part of the
// state (digest, snapshot).
func TestSetProtocol_OnlyRaises(t *testing.T) {
	m := fsmtest.NewAt(t, 1)
	twin := fsmtest.NewAt(t, 1)
	if got := m.ProtocolLevel(); got != 1 {
		t.Fatalf("a new log is at level %d, want 1", got)
	}
	if r, _ := fsmtest.One(t, m, 2, fsmtest.SetProtocol(2)); r.GetCode() != 0 || m.ProtocolLevel() != 2 {
		t.Fatalf("raise to 2: %v, level %d", r, m.ProtocolLevel())
	}
	fsmtest.One(t, twin, 2, &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}})
	if m.Digest() == twin.Digest() {
		t.Fatal("the level is not in the digest")
	}
	twin = roundTrip(t, m)
	for _, l := range []uint32{2, 1, 0} {
		if r, _ := fsmtest.One(t, m, 3, fsmtest.SetProtocol(l)); r.GetCode() != 0 || m.ProtocolLevel() != 2 {
			t.Fatalf("SetProtocol %d at level 2: %v, level %d", l, r, m.ProtocolLevel())
		}
		fsmtest.One(t, twin, 3, &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}})
	}
	r, _ := fsmtest.One(t, m, 3, fsmtest.SetProtocol(fsm.Protocol+1))
	fsmtest.One(t, twin, 3, &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}})
	if r.GetCode() != 540 || m.ProtocolLevel() != 2 {
		t.Fatalf("SetProtocol above this binary: %v, level %d", r, m.ProtocolLevel())
	}
	if m.Digest() != twin.Digest() {
		t.Fatal("a SetProtocol that did not raise the level changed the state")
	}
	if n := roundTrip(t, m); n.ProtocolLevel() != 2 {
		t.Fatalf("restored at level %d, want 2", n.ProtocolLevel())
	}
}

func TestValidate_SetProtocol(t *testing.T) {
	if err := fsm.Validate(fsmtest.SetProtocol(fsm.Protocol), fsm.Limits{}); err != nil {
		t.Fatal(err)
	}
	if e := invalid(t, fsm.Validate(fsmtest.SetProtocol(0), fsm.Limits{})); e.Code != 541 {
		t.Fatalf("level 0: %v", e)
	}
	e := invalid(t, fsm.Validate(fsmtest.SetProtocol(fsm.Protocol+1), fsm.Limits{}))
	if e.Code != 540 || !strings.HasPrefix(e.Text, "NOT_IMPLEMENTED - ") {
		t.Fatalf("level above this binary: %d %q", e.Code, e.Text)
	}
}

// A node stops at an entry raising the level above what it applies,
// rather than apply what follows with the behaviour of an older level.
func TestCheckEntry_LevelAboveThisBinary(t *testing.T) {
	env := &proto.Envelope{Version: 1, Commands: []*proto.Command{fsmtest.SetProtocol(fsm.Protocol)}}
	if err := fsm.CheckEntry(fsm.Entry{Index: 4, Envelope: env}); err != nil {
		t.Fatal(err)
	}
	env.Commands = append(env.Commands, fsmtest.SetProtocol(fsm.Protocol+1))
	err := fsm.CheckEntry(fsm.Entry{Index: 4, Envelope: env})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("log entry 4, command 1: raises the protocol level to %d", fsm.Protocol+1)) {
		t.Fatalf("CheckEntry: %v", err)
	}
}

func restoreBytes(t *testing.T, b []byte) *fsm.Machine {
	t.Helper()
	n := fsm.New()
	if err := n.Restore(bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	return n
}

// Snapshots of formats 2 and 3 were written before the log had a level:
// they load at level 1 and go on numbering as the first release did.
// Format 3's floor is dropped (a replica replaying the log from its start
// has none at level 1), and a snapshot at a level above this binary's is
// refused.
func TestSnapshot_EarlierFormatsLoadAtLevel1(t *testing.T) {
	for _, version := range []uint64{2, 3} {
		t.Run(fmt.Sprint("format ", version), func(t *testing.T) {
			m := fsmtest.NewAt(t, 1)
			fsmtest.One(t, m, 2, declare("q", nil))
			fsmtest.One(t, m, 2, consume("q", "c", ch1, 10))
			fsmtest.One(t, m, 3, publish("", "q", "x", nil))
			b, err := fsm.SnapshotAs(m, version, 1)
			if err != nil {
				t.Fatal(err)
			}
			n := restoreBytes(t, b)
			if n.ProtocolLevel() != 1 || n.Digest() != m.Digest() {
				t.Fatalf("format %d restored at level %d, same digest %v", version, n.ProtocolLevel(), n.Digest() == m.Digest())
			}
			fsmtest.One(t, n, 4, nodeDown(ch1.GetNode()))
			if _, rec := fsmtest.One(t, n, 5, consume("q", "c", ch1, 10)); !slices.Equal(tagsOf(rec), []uint64{1}) {
				t.Fatalf("tags %v after the channel came back, want [1]", tagsOf(rec))
			}
		})
	}
	t.Run("format 3 floor", func(t *testing.T) {
		m := fsmtest.NewAt(t, 2)
		fsmtest.One(t, m, 2, declare("q", nil))
		fsmtest.One(t, m, 2, consume("q", "c", ch1, 10))
		fsmtest.Apply(t, m, 3, publish("", "q", "x", nil), publish("", "q", "y", nil))
		fsmtest.One(t, m, 4, nodeDown(ch1.GetNode())) // the floor is 2
		if _, rec := fsmtest.One(t, roundTrip(t, m), 5, consume("q", "d", ch2, 10)); !slices.Equal(tagsOf(rec), []uint64{3, 4}) {
			t.Fatalf("tags %v on a new channel at level 2, want [3 4]", tagsOf(rec))
		}
		b, err := fsm.SnapshotAs(m, 3, 0)
		if err != nil {
			t.Fatal(err)
		}
		n := restoreBytes(t, b)
		fsmtest.One(t, n, 5, fsmtest.SetProtocol(2))
		if _, rec := fsmtest.One(t, n, 6, consume("q", "d", ch2, 10)); !slices.Equal(tagsOf(rec), []uint64{1, 2}) {
			t.Fatalf("tags %v on a new channel, want [1 2]: the floor of format 3 is dropped", tagsOf(rec))
		}
	})
	t.Run("level above this binary", func(t *testing.T) {
		b, err := fsm.SnapshotAs(fsmtest.New(t), 4, fsm.Protocol+1)
		if err != nil {
			t.Fatal(err)
		}
		if err := fsm.New().Restore(bytes.NewReader(b)); err == nil || !strings.Contains(err.Error(), "newer version") {
			t.Fatalf("restore: %v", err)
		}
	})
}

// upgradeLog is a log begun by the first release (level 1, with a channel
// created again after its node was declared down), whose level is raised
// half way, after which channels are removed and created again.
func upgradeLog() [][]*proto.Command {
	tick := &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}
	return [][]*proto.Command{
		{{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}},
			{Cmd: &proto.Command_UserPut{UserPut: &proto.UserPut{Name: "guest"}}}},
		{declare("q", nil)},
		{consume("q", "c", ch1, 10)},
		{publish("", "q", "a", nil), publish("", "q", "b", nil), publish("", "q", "c", nil)},
		{nodeDown(ch1.GetNode())},
		{consume("q", "c", ch1, 10)}, // level 1: tags 1, 2, 3 again
		{tick, fsmtest.SetProtocol(2)},
		{settleTags(ch1, 1)},
		{nodeDown(ch1.GetNode())},
		{consume("q", "c", ch1, 10)}, // level 2: 4, 5
		{publish("", "q", "d", nil)}, // 6
		{channelClosed(ch1)},
		{consume("q", "d", ch2, 10)}, // a new channel: 7, 8, 9
	}
}

// A replica that replays a log from its first entry and one restored from
// a snapshot taken anywhere in it (before or after the level was raised;
// before it, also in the formats of the binaries before levels) are in
// the same state after every entry and deliver with the same tags.
func TestProtocol_ReplayAndRestoreAgreeAcrossSetProtocol(t *testing.T) {
	entries := upgradeLog()
	type step struct {
		tags   []uint64
		digest [32]byte
	}
	run := func(m *fsm.Machine, from int) []step {
		var out []step
		for i, cmds := range entries[from:] {
			_, rec := fsmtest.Apply(t, m, int64(10+from+i), cmds...)
			out = append(out, step{tagsOf(rec), m.Digest()})
		}
		return out
	}
	replay := run(fsm.New(), 0)
	if got := fmt.Sprint(replay[5].tags, replay[9].tags, replay[10].tags, replay[12].tags); got != "[1 2 3] [4 5] [6] [7 8 9]" {
		t.Fatalf("tags of the replay: %s", got)
	}
	for cut := 1; cut < len(entries); cut++ {
		head := fsm.New()
		for i, cmds := range entries[:cut] {
			fsmtest.Apply(t, head, int64(10+i), cmds...)
		}
		formats := []uint64{4}
		if head.ProtocolLevel() == 1 {
			formats = append(formats, 2, 3)
		}
		for _, f := range formats {
			b, err := fsm.SnapshotAs(head, f, head.ProtocolLevel())
			if err != nil {
				t.Fatal(err)
			}
			for i, got := range run(restoreBytes(t, b), cut) {
				if want := replay[cut+i]; got.digest != want.digest || !slices.Equal(got.tags, want.tags) {
					t.Fatalf("snapshot after entry %d (format %d), entry %d: tags %v, replay %v; same digest %v",
						cut, f, cut+i+1, got.tags, want.tags, got.digest == want.digest)
				}
			}
		}
	}
}
