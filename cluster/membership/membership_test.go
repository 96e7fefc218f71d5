package membership

import (
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/raftmq/raftmq/proto"
	gproto "google.golang.org/protobuf/proto"
)

// A member that announced it is leaving shows left, and stays left when
// memberlist then declares it dead; one that died without a word is dead.
func TestTable_LeavingMemberThatDiesHasLeft(t *testing.T) {
	tab := NewTable()
	node := func(id string, leaving bool) *memberlist.Node {
		b, err := gproto.Marshal(&proto.NodeMeta{Id: id, Leaving: leaving})
		if err != nil {
			t.Fatal(err)
		}
		return &memberlist.Node{Name: id, Meta: b}
	}
	tab.Set(node("a", false), HealthAlive)
	tab.Set(node("b", false), HealthAlive)
	tab.Set(node("a", true), HealthAlive)
	tab.Set(node("a", true), HealthDead)
	tab.Set(node("b", false), HealthDead)
	for id, want := range map[string]string{"a": HealthLeft, "b": HealthDead} {
		if m, ok := tab.Get(id); !ok || m.Health != want {
			t.Errorf("%s: %q (known %v), want %q", id, m.Health, ok, want)
		}
	}
}

// A new leader gives every server the wait from when it first counts it,
// whatever it answered before the term, except the leader it followed
// before: that one is counted from when this node last heard from it,
// though not from before the floor.
func TestReach_NewTermCountsThePreviousLeaderFromItsSilence(t *testing.T) {
	r := NewReach()
	now := time.Now()
	r.LeaderGone("old", now.Add(-time.Hour))
	r.Reset(now, now.Add(-time.Minute))
	r.Ack("fresh", now)
	r.Ack("stale", now.Add(-2*time.Second))
	got := r.Unreachable([]string{"self", "fresh", "stale", "new", "old"}, "self", time.Second)
	if s := r.SilentFor("old", now); s < time.Minute {
		t.Errorf("the previous leader silent for %v, want the floor's minute", s)
	}
	if want := []string{"old"}; !slices.Equal(got, want) {
		t.Fatalf("unreachable %v, want %v", got, want)
	}
}
