package cluster

import "testing"

// A queue group's NodeDown is proposed once while it is on its way or
// declared, again after a failure, and a proposal started before the
// node was found back records nothing.
func TestDowns_OneProposalAtATimeAndNoneFromBeforeTheNodeCameBack(t *testing.T) {
	d := newDowns()
	k := groupKey("n1", "q1")
	e, ok := d.start("n1", k)
	if !ok {
		t.Fatal("the first proposal did not start")
	}
	if _, again := d.start("n1", k); again {
		t.Fatal("a second proposal started while the first is on its way")
	}
	other := groupKey("n1", "q2")
	if _, ok := d.start("n1", other); !ok {
		t.Fatal("a proposal to another group waits for the first")
	}
	d.finish("n1", k, e, false)
	if d.isDeclared(k) {
		t.Fatal("a failed proposal counts as declared")
	}
	e, ok = d.start("n1", k)
	if !ok {
		t.Fatal("no new proposal after a failure")
	}
	d.finish("n1", k, e, true)
	if !d.isDeclared(k) {
		t.Fatal("a committed proposal is not declared")
	}
	if _, again := d.start("n1", k); again {
		t.Fatal("a proposal started for a node declared down")
	}

	// Found back while a proposal was on its way: it records nothing,
	// and a later loss is proposed anew.
	d.declare("n2")
	k2 := groupKey("n2", "q1")
	e2, _ := d.start("n2", k2)
	d.forget("n2")
	if d.isDeclared("n2") {
		t.Fatal("the metadata log's NodeDown is still recorded for a node found back")
	}
	d.finish("n2", k2, e2, true)
	if d.isDeclared(k2) {
		t.Fatal("a proposal from before the node came back was recorded")
	}
	if _, ok := d.start("n2", k2); !ok {
		t.Fatal("no new proposal for a node lost again")
	}
	// Forgetting one node leaves the others.
	if !d.isDeclared(k) {
		t.Fatal("forgetting n2 forgot n1")
	}
}
