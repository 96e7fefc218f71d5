package group

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/fsm"
)

// RunSnapshots starts the loops that ask raft for a snapshot besides its
// own entry count: by the bytes appended, and when the bodies the last
// one named are mostly gone (with the entry threshold's scaling). They
// end when closing closes.
func (g *Group) RunSnapshots(closing <-chan struct{}) {
	g.wg.Add(1)
	go g.reclaimLoop(closing)
	if g.storage.Meter().Budget() > 0 {
		g.wg.Add(1)
		go g.snapshotBytesLoop(closing)
	}
}

// ScaleSnapshotThreshold runs one round of the entry threshold's scaling
// now (the reclaim loop runs one every SnapshotInterval).
func (g *Group) ScaleSnapshotThreshold() { g.scaleSnapshotThreshold(g.heldMessages()) }

// err is why the node stopped applying the log, nil while it applies.
func (g *Group) err() error { return g.fsm.err() }

// Await waits for a raft future, giving up when ctx ends or closing
// closes: raft leaves some futures unanswered when it shuts down
// (entries committed but not yet applied, barriers), so no goroutine may
// wait on one unconditionally.
func Await(ctx context.Context, closing <-chan struct{}, f raft.Future) error {
	errc := make(chan error, 1)
	go func() { errc <- f.Error() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-closing:
		select {
		case err := <-errc:
			return err
		default:
			return fmt.Errorf("%w: %w", ErrClosed, ErrOutcomeUnknown)
		}
	}
}

// scaleSnapshotThreshold sets raft's entry threshold for the messages the
// state holds now (heldMessages), when the configuration left it at its
// default.
func (g *Group) scaleSnapshotThreshold(held uint64) {
	if !g.cfg.ScaleSnapshotThreshold {
		return
	}
	want := SnapshotThreshold(g.cfg.Raft.SnapshotThreshold, held)
	r := g.Raft()
	if r.ReloadableConfig().SnapshotThreshold == want {
		return
	}
	g.reloadConfig(r, func(cur raft.ReloadableConfig) []raft.ReloadableConfig {
		cur.SnapshotThreshold = want
		return []raft.ReloadableConfig{cur}
	})
}

// snapshotBytesLoop snapshots when the meter says the log grew by its
// budget. Each attempt starts a new count whatever its outcome, and any
// snapshot raft takes itself (by entry count, or the body reclaimer's)
// does too, so there is at most one attempt per budget of appended bytes:
// a snapshot that cannot compact the log (its bodies pinned, or the
// trailing entries kept) is still taken only once per budget, and still
// bounds a restart, which reads only the entries after it.
//
// The replicas of a group append the same bytes, so by size alone they
// would all snapshot at once, and a snapshot of a long queue is seconds
// of a core and its disk: traced behind 5,000,000 queued, the three
// nodes' snapshots of the same index ran side by side for 6 s, and a
// paced queue's deliveries took up to 445 ms meanwhile (every commit
// needs a majority, and the whole majority was snapshotting). So each
// replica's first snapshot by size waits a share of a budget more
// (snapshotStagger), and those after it keep that phase, one budget
// apart: while one replica snapshots, the others make a majority.
func (g *Group) snapshotBytesLoop(closing <-chan struct{}) {
	defer g.wg.Done()
	m := g.storage.Meter()
	var stagger int64 // what the first snapshot waits beyond the budget
	staggered := false
	for {
		select {
		case <-m.Due():
		case <-closing:
			return
		}
		if !staggered {
			stagger, staggered = g.snapshotStagger(m.Budget()), true
		}
		if m.Pending() < m.Budget()+stagger || g.err() != nil {
			continue
		}
		stagger = 0
		pending := m.Pending()
		m.Reset()
		err := Await(context.Background(), closing, g.Raft().Snapshot())
		switch {
		case err == nil:
			g.cfg.Logger.Info("snapshot by log size", "appended_bytes", pending)
		case errors.Is(err, raft.ErrNothingNewToSnapshot):
		default:
			g.cfg.Logger.Warn("snapshot by log size", "appended_bytes", pending, "err", err)
		}
	}
}

// snapshotStagger is the share of budget this replica's first snapshot
// by size waits beyond it: budget × its rank among the voters' ids / the
// voters, so that replicas spread their snapshots over a budget.
func (g *Group) snapshotStagger(budget int64) int64 {
	f := g.Raft().GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	var ids []string
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			ids = append(ids, string(s.ID))
		}
	}
	return staggerShare(budget, ids, g.cfg.ID)
}

// staggerShare is budget × the rank of self among ids (sorted) / len(ids);
// 0 when self is not among them.
func staggerShare(budget int64, ids []string, self string) int64 {
	slices.Sort(ids)
	i := slices.Index(ids, self)
	if i <= 0 {
		return 0
	}
	return budget / int64(len(ids)) * int64(i)
}

// reclaimLoop snapshots once most of the bodies the last snapshot named
// are gone. Bodies are reclaimed (log compacted, body files deleted) only
// when a snapshot no longer names them, and raft snapshots by entry
// count: a drained backlog on a cluster that then goes quiet would keep
// its disk for as long as nothing else is written.
func (g *Group) reclaimLoop(closing <-chan struct{}) {
	defer g.wg.Done()
	tick := time.NewTicker(g.cfg.Raft.SnapshotInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if g.err() != nil {
				continue
			}
			// Both read the same count: the state is read once a tick.
			// The threshold first: the reclaim waits for its snapshot,
			// which a loaded node may take seconds to write.
			queued := g.heldMessages()
			g.scaleSnapshotThreshold(queued)
			g.reclaimBodies(queued)
		case <-closing:
			return
		}
	}
}

// heldMessages is the messages the state holds: ready, unacked, delayed.
func (g *Group) heldMessages() uint64 {
	var held uint64
	g.fsm.state.View(func(m *fsm.Machine) {
		st := m.Stats()
		held = st.Ready + st.Unacked + st.Delayed
	})
	return held
}

// reclaimBodies snapshots once the state holds less than half the bodies
// the last snapshot named (queued: heldMessages).
func (g *Group) reclaimBodies(queued uint64) {
	named := g.fsm.SnapshotBodies()
	if named == 0 || int64(queued)*2 > named {
		return
	}
	if err := g.Raft().Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		g.cfg.Logger.Warn("snapshot to reclaim message bodies", "err", err)
	}
}
