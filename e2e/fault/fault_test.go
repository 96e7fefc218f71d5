package fault

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftmq/raftmq/e2e"
)

// scenario is one fault: inject runs it and returns once the cluster is
// whole again. needs, when set, says why the fault cannot be made here
// ("" when it can); the scenario then skips.
type scenario struct {
	name   string
	inject func(t *testing.T, c *cluster)
	needs  func() string
	// limits are the scenario's own bounds on top of the rules every
	// scenario is held to (run sets deliveryGrace).
	limits limits
	// placed runs the cluster with three queue groups and the
	// workload's queues placed in them: each in its own group, so dead
	// letters and expired messages cross from one group to another.
	placed bool
	// size is the number of nodes (0: three). Past three, each queue
	// group has three members and the others serve its queues through
	// them.
	size int
}

// How long a cut-off node stays cut off: past the node-down delay, so its
// consumers are cancelled and their messages requeued.
const cutFor = 8 * time.Second

// outage takes one node down with down, keeps it down for d (the fault
// itself, a fixed spell, not a wait for a condition), then brings it
// back with up.
func outage(leader bool, d time.Duration, down, up func(c *cluster, i int)) func(t *testing.T, c *cluster) {
	return func(t *testing.T, c *cluster) {
		i := c.leader()
		if !leader {
			i = (i + 1) % len(c.nodes)
		}
		down(c, i)
		c.sitOut(i, d)
		up(c, i)
	}
}

// silent holds a fault nobody is told of (a node frozen, or cut off with
// its clients still connected) to what detecting it promptly gives: a
// message confirmed at once dies no more than 2 s after its deadline at
// the 99th percentile. A dead letter the silent node's consumer held,
// which its client never got, goes to another consumer only once the
// cluster declares the node down, nodeDownAfter into its silence: it is
// allowed that much more (limits.heldLate).
var silent = limits{deathLate: 2 * time.Second, heldLate: nodeDownAfter + 2*time.Second}

// nodeDownAfter is the nodes' --node-down-after: the suite runs the
// default.
const nodeDownAfter = 1500 * time.Millisecond

var scenarios = []scenario{
	{name: "kill-leader", inject: outage(true, cutFor, (*cluster).kill, (*cluster).start)},
	{name: "kill-follower", inject: outage(false, cutFor, (*cluster).kill, (*cluster).start)},
	// Cut off from its peers, reachable from its clients (isolate).
	{name: "partition-leader", inject: outage(true, cutFor, (*cluster).isolate, (*cluster).rejoin), needs: partitionReady, limits: silent},
	{name: "partition-follower", inject: outage(false, cutFor, (*cluster).isolate, (*cluster).rejoin), needs: partitionReady, limits: silent},
	{name: "rolling-restart", inject: rolling},
	// Stopped and started as a whole: confirms may stop for the stop
	// and the start, not for a node that waits on a quorum that is gone.
	{name: "restart-cluster", inject: func(t *testing.T, c *cluster) {
		start := time.Now()
		c.stopAll()
		stopped := time.Now()
		c.startAll()
		c.noProcess = c.noMajority()
		t.Logf("restart-cluster: stopped in %v, started and ready in %v; no majority of nodes ran for %v",
			stopped.Sub(start).Round(time.Millisecond), time.Since(stopped).Round(time.Millisecond), c.noProcess.Round(time.Millisecond))
	}, limits: limits{pause: 5 * time.Second}},
	// kill -9 of all three under load, as a power cut would.
	{name: "power-cut", inject: func(t *testing.T, c *cluster) {
		c.killAll()
		c.startNodes()
	}},
	// A node's processes stopped (docker pause) long enough for the
	// others to elect a new leader or declare it down, then resumed: a
	// deposed leader, or a follower far behind, whose clients stayed
	// connected all along.
	{name: "freeze-leader", inject: frozen(true), limits: silent},
	{name: "freeze-follower", inject: frozen(false), limits: silent},
	// The leader killed with a deep backlog queued (backlog_test.go).
	{name: "backlog-kill-leader", inject: backlogScenario},
	// The same faults with the queues in queue groups: the metadata
	// leader leads some of them too, and a node started again must
	// release what its previous run held in each group.
	{name: "placed-kill-leader", inject: outage(true, cutFor, (*cluster).kill, (*cluster).start), placed: true},
	{name: "placed-kill-follower", inject: outage(false, cutFor, (*cluster).kill, (*cluster).start), placed: true},
	{name: "placed-partition-leader", inject: outage(true, cutFor, (*cluster).isolate, (*cluster).rejoin), needs: partitionReady, limits: silent, placed: true},
	{name: "placed-freeze-leader", inject: frozen(true), limits: silent, placed: true},
	{name: "placed-rolling-restart", inject: rolling, placed: true},
	// Five nodes, groups of three: clients on nodes outside a queue's
	// group, and the node killed, frozen or cut off leads the metadata
	// and some of the groups.
	{name: "placed5-kill-leader", inject: outage(true, cutFor, (*cluster).kill, (*cluster).start), placed: true, size: 5},
	{name: "placed5-freeze-leader", inject: frozen(true), limits: silent, placed: true, size: 5},
	{name: "placed5-partition-leader", inject: outage(true, cutFor, (*cluster).isolate, (*cluster).rejoin), needs: partitionReady, limits: silent, placed: true, size: 5},
	// Each new leader killed in turn as soon as the killed one is back:
	// ex-leaders rejoin and truncate their log's suffix again and again.
	{name: "kill-leader-3x", inject: func(t *testing.T, c *cluster) {
		for range 3 {
			i := c.leader()
			c.kill(i)
			c.start(i)
			if len(c.notBack) > 0 {
				return
			}
		}
	}},
}

// rolling stops each node in turn and starts it again at once, well
// within the node-down delay: no one declares it down, and it releases
// its previous run itself.
func rolling(t *testing.T, c *cluster) {
	for i := range c.nodes {
		c.stop(i)
		c.start(i)
		if len(c.notBack) > 0 {
			return
		}
		c.waitMembers()
	}
}

// frozen stops the leader's or a follower's processes for freezeFor and
// waits until the node is ready again.
func frozen(leader bool) func(t *testing.T, c *cluster) {
	return func(t *testing.T, c *cluster) {
		i := c.leader()
		if !leader {
			i = (i + 1) % len(c.nodes)
		}
		c.freeze(i)
		c.sitOut(i, freezeFor)
		c.thaw(i)
		c.comeBack(i)
	}
}

// How long a frozen node stays stopped: several election timeouts.
const freezeFor = 6 * time.Second

// Tolerances the checker applies, and why.
const (
	// A delivery reaches its client after the deadline was decided in log
	// time: apply on the consumer's node, a trip over the bridge, a loaded
	// two-core machine running three nodes and the race-enabled test.
	deliveryGrace = time.Second
	// An unused x-expires queue is deleted by the leader's lease scheduler;
	// when its lease runs out during the fault, the new leader (elected, or
	// the cluster started again) deletes it as soon as it takes over.
	leaseGrace = 3 * time.Second
	idleLease  = 3 * time.Second
	// With no fault on, the scheduler deletes an unused queue within
	// milliseconds of its lease; the watcher polls every 100 ms through a
	// fresh connection.
	quietLeaseGrace = 1500 * time.Millisecond
)

var (
	reportMu sync.Mutex
	reports  []report
)

func TestFaults(t *testing.T) {
	skipWithoutDocker(t)
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			if sc.needs != nil {
				if why := sc.needs(); why != "" {
					t.Skip(why)
				}
			}
			run(t, sc)
		})
	}
	reportMu.Lock()
	defer reportMu.Unlock()
	var b strings.Builder
	writeTable(&b, reports)
	t.Logf("fault suite:\n%s", b.String())
	appendReport(t, b.String())
}

// appendReport appends a table to the file RAFTMQ_FAULT_REPORT names, if
// any (.ci/run prints it).
func appendReport(t *testing.T, table string) {
	path := os.Getenv("RAFTMQ_FAULT_REPORT")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fmt.Fprintf(f, "%s\n", table)
}

// limitsWithGrace is what the checker holds the scenario to.
func (sc scenario) limitsWithGrace() limits {
	l := sc.limits
	l.deliveryGrace = deliveryGrace
	return l
}

func run(t *testing.T, sc scenario) {
	var c *cluster
	if sc.placed {
		c = startClusterOf(t, strings.ReplaceAll(sc.name, "-", ""), max(sc.size, 3), placedEnv)
		c.groups = placedGroups
		c.waitPlacing()
	} else {
		c = startCluster(t, strings.ReplaceAll(sc.name, "-", ""))
	}
	c.declareTopology()
	c.declareLease(usedLease, usedLeaseTTL)
	watch, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	idle1 := leaseResult{name: "idle-before", expires: idleLease, allowed: quietLeaseGrace}
	idle1.declared = c.declareLease("fault.lease.idle1", idleLease)
	idle1Gone := c.watchLease(watch, "fault.lease.idle1")

	w := c.startWorkload()
	if err := e2e.Eventually(30*time.Second, func() error {
		if n := w.rec.confirmedCount(); n < 200 {
			return fmt.Errorf("%d confirmed", n)
		}
		return nil
	}); err != nil {
		t.Fatalf("workload does not start: %v", err)
	}
	// The first idle queue's lease runs out before the fault.
	select {
	case idle1.gone = <-idle1Gone:
	case <-time.After(idleLease + 2*leaseGrace):
	}

	// The second idle queue's lease runs out while the fault is on.
	idle2 := leaseResult{name: "idle-during", expires: idleLease}
	idle2.declared = c.declareLease("fault.lease.idle2", idleLease)
	idle2Gone := c.watchLease(watch, "fault.lease.idle2")
	faultAt := time.Now()
	sc.inject(t, c)
	healedAt := time.Now()
	if len(c.notBack) > 0 {
		// The cluster is not whole: what it delivers from now on says
		// nothing more. The row shows the fault; the scenario fails.
		w.stopPublishing()
		w.stopConsuming()
		rep, _ := w.rec.check(sc.name, sc.limitsWithGrace(), faultAt, time.Now())
		rep.nodesBack = false
		rep.ledAgain, rep.ledMeasured = c.ledAgain, c.ledMeasured
		for _, b := range c.notBack {
			t.Error(b)
		}
		reportMu.Lock()
		reports = append(reports, rep)
		reportMu.Unlock()
		return
	}
	// A lease that ran out while no leader could act is deleted once one
	// can: allow the fault's length on top of the grace.
	idle2.allowed = leaseGrace + healedAt.Sub(idle2.declared)

	// Let the workload run on the whole cluster again, then stop
	// publishing and wait for the consumers to drain every queue.
	c.waitMembers()
	pause(context.Background(), 5*time.Second)
	w.stopPublishing()
	publishEnd := time.Now()
	// The getters stopped with the publishers: the used queue must be
	// there now (its lease runs out usedLeaseTTL later).
	used := leaseResult{name: "used", used: true, expires: usedLeaseTTL}
	if e, ok := c.exists(0, usedLease); ok && !e {
		used.gone = time.Now()
	} else if !ok {
		t.Errorf("cannot ask whether %s exists", usedLease)
	}
	if err := e2e.Eventually(90*time.Second, func() error {
		if n := w.rec.missing(); n > 0 {
			return fmt.Errorf("%d confirmed messages not yet received", n)
		}
		return nil
	}); err != nil {
		t.Errorf("drain: %v", err)
		c.logQueues()
	}
	w.stopConsuming()

	waitGone := func(ch <-chan time.Time) time.Time {
		select {
		case at := <-ch:
			return at
		case <-time.After(leaseGrace + idleLease):
			return time.Time{}
		}
	}
	idle2.gone = waitGone(idle2Gone)
	stopWatch()

	if err := c.digestsAgree(60 * time.Second); err != nil {
		t.Errorf("state digests differ: %v", err)
	}

	lim := sc.limitsWithGrace()
	lim.noProcess = c.noProcess
	rep, bad := w.rec.check(sc.name, lim, faultAt, publishEnd)
	rep.leases = []leaseResult{idle1, idle2, used}
	rep.ledAgain, rep.ledMeasured = c.ledAgain, c.ledMeasured
	for _, l := range rep.leases {
		bad = append(bad, l.violations()...)
	}
	for _, b := range bad {
		t.Error(b)
	}
	var tbl strings.Builder
	writeTable(&tbl, []report{rep})
	t.Logf("fault %s injected at +0, healed after %v:\n%s", sc.name, healedAt.Sub(faultAt).Round(time.Millisecond), tbl.String())
	reportMu.Lock()
	reports = append(reports, rep)
	reportMu.Unlock()
}
