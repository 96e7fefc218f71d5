package fsm

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"os"
	"reflect"
	"testing"

	"github.com/raftmq/raftmq/proto"
)

// TestMain checks the due sets against a walk of every queue after every
// entry any test of the package applies, and after every restore it
// reads back: a queue left out of a set would never see its messages die
// or its lease run out. It checks too that every queue that came or went
// since the last entry is in the log of queue changes: a mirror would
// never bring it into its group or out. Benchmarks run without the
// checks.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		checkHook = func(s *state) {
			if err := s.checkDueSets(); err != nil {
				panic(fmt.Sprintf("after entry %d: %v", s.index, err))
			}
			if err := s.checkQueueChanges(); err != nil {
				panic(fmt.Sprintf("after entry %d: %v", s.index, err))
			}
		}
	}
	os.Exit(m.Run())
}

// checkDueSets compares what the due sets answer with a walk of every
// queue, as the scans were before the sets.
func (s *state) checkDueSets() error {
	var wantNext, wantLease int64
	var hasNext, hasLease bool
	for _, v := range s.vhosts {
		for _, q := range v.queues {
			if d, ok := q.q.EarliestDeadline(); ok && (!hasNext || d < wantNext) {
				wantNext, hasNext = d, true
			}
			if d, ok := s.leaseToPropose(q); ok && (!hasLease || d < wantLease) {
				wantLease, hasLease = d, true
			}
		}
	}
	if d, ok := s.nextDeadline(); d != wantNext || ok != hasNext {
		return fmt.Errorf("nextDeadline %d %v, a walk of every queue %d %v", d, ok, wantNext, hasNext)
	}
	if d, ok := s.nextLeaseDue(); d != wantLease || ok != hasLease {
		return fmt.Errorf("nextLeaseDue %d %v, a walk of every queue %d %v", d, ok, wantLease, hasLease)
	}
	for _, now := range []int64{s.clock, math.MaxInt64} {
		if got, want := s.dueExpiries(now), s.walkDue(now, (*queueState).earliest); !reflect.DeepEqual(got, want) {
			return fmt.Errorf("dueExpiries(%d) %v, a walk of every queue %v", now, got, want)
		}
		if got, want := s.dueLeases(now), s.walkDue(now, s.leaseToPropose); !reflect.DeepEqual(got, want) {
			return fmt.Errorf("dueLeases(%d) %v, a walk of every queue %v", now, got, want)
		}
	}
	for q := range s.timed {
		if !q.inTimed || q.deleted {
			return fmt.Errorf("queue %q in the timed set: inTimed %v, deleted %v", q.name, q.inTimed, q.deleted)
		}
	}
	for q := range s.leased {
		if !q.inLeased || q.deleted {
			return fmt.Errorf("queue %q in the leased set: inLeased %v, deleted %v", q.name, q.inLeased, q.deleted)
		}
	}
	return nil
}

func (q *queueState) earliest() (int64, bool) { return q.q.EarliestDeadline() }

// walkDue lists, by vhost and name, the queues whose due(q) is at or
// before now, walking every queue.
func (s *state) walkDue(now int64, due func(*queueState) (int64, bool)) []*proto.QueueRef {
	var out []*proto.QueueRef
	for _, vk := range sortedKeys(s.vhosts) {
		v := s.vhosts[vk]
		for _, qk := range sortedKeys(v.queues) {
			if d, ok := due(v.queues[qk]); ok && d <= now {
				out = append(out, &proto.QueueRef{Vhost: vk, Name: qk})
			}
		}
	}
	return out
}

// TestDueSets_ARestoredStateAnswersAsItsOrigin: the sets are not in the
// snapshot; a restore rebuilds them through the paths that keep them.
func TestDueSets_ARestoredStateAnswersAsItsOrigin(t *testing.T) {
	m := New()
	setup := []*proto.Command{
		{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}},
		{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "ttl", Durable: true,
			Arguments: &proto.Table{Fields: []*proto.Field{{Key: "x-message-ttl", Value: i64v(500)}}}}}},
		{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "lease", Durable: true,
			Arguments: &proto.Table{Fields: []*proto.Field{{Key: "x-expires", Value: i64v(900)}}}}}},
		{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "plain", Durable: true}}},
		{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: "ttl", Body: []byte("x")}}},
		{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: "plain", Body: []byte("y")}}},
	}
	m.Apply(Entry{Index: 1, Envelope: &proto.Envelope{StampMs: 1000, Commands: setup}}, DiscardSink{})
	if d, ok := m.NextDeadline(); !ok || d != 1500 {
		t.Fatalf("next deadline %d %v, want 1500", d, ok)
	}
	if d, ok := m.NextLeaseDue(); !ok || d != 1900 {
		t.Fatalf("next lease %d %v, want 1900", d, ok)
	}
	r := New()
	if err := r.Restore(bytes.NewReader(m.encode())); err != nil {
		t.Fatal(err)
	}
	if err := r.checkDueSets(); err != nil {
		t.Fatal(err)
	}
	if len(r.timed) != 1 || len(r.leased) != 1 {
		t.Fatalf("restored sets: %d timed, %d leased; want 1 and 1", len(r.timed), len(r.leased))
	}
	if got := r.DueExpiries(1500); len(got) != 1 || got[0].GetName() != "ttl" {
		t.Fatalf("restored due expiries at 1500: %v", got)
	}
	if got := r.DueLeases(1900); len(got) != 1 || got[0].GetName() != "lease" {
		t.Fatalf("restored due leases at 1900: %v", got)
	}
}
