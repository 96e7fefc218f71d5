package group

import (
	"errors"

	"github.com/hashicorp/raft"
)

// A follower can hold its snapshot at index p and log entries p+1..last
// without the entry p itself: it installed the leader's snapshot at p,
// appended what came next, and its answer to that append was lost (it
// was killed, or the connection dropped). The leader then sends the same
// entries again with PrevLogEntry p. hashicorp/raft's follower
// (appendEntries, v1.7.3 and v1.8.0) checks PrevLogEntry against its last
// entry or its log, never against its snapshot, so it refuses; the
// leader walks back to the start of its own log and sends the snapshot
// again, which changes nothing on the follower: every round trip
// transfers the whole snapshot, bodies included, until the leader's next
// snapshot moves past the follower's last entry. A test cluster with
// nothing more to write saw it forever.
//
// mendSnapshotGap rewrites such a request before raft sees it, when that
// is provably the same request: PrevLogEntry is the follower's snapshot
// index with the snapshot's term, so both logs agree up to p, and the
// request carries the follower's entries p+1..last with the same terms,
// so they agree up to last (raft's log matching). The request then
// continues from last, and raft's own checks run on it as on any other.
// Anything else (an entry missing, a term that differs, a follower
// holding more than the request carries) is left for raft as it came.
func mendSnapshotGap(a *raft.AppendEntriesRequest, logs raft.LogStore, snapshot func() (index, term uint64, ok bool)) bool {
	p := a.PrevLogEntry
	if p == 0 || len(a.Entries) == 0 {
		return false
	}
	last, err := logs.LastIndex()
	if err != nil || p >= last || uint64(len(a.Entries)) < last-p {
		return false
	}
	var l raft.Log
	if err := logs.GetLog(p, &l); !errors.Is(err, raft.ErrLogNotFound) {
		return false
	}
	si, st, ok := snapshot()
	if !ok || si != p || st != a.PrevLogTerm {
		return false
	}
	held := a.Entries[:last-p]
	for i, e := range held {
		if e.Index != p+1+uint64(i) {
			return false
		}
		if err := logs.GetLog(e.Index, &l); err != nil || l.Term != e.Term {
			return false
		}
	}
	end := held[len(held)-1]
	a.PrevLogEntry, a.PrevLogTerm = end.Index, end.Term
	a.Entries = a.Entries[len(held):]
	return true
}

// GapBridge passes the RPCs the transport receives on to raft, mending
// the appends mendSnapshotGap recognises on the way. It is raft's
// Consumer: one goroutine, so the order of RPCs is kept.
type GapBridge struct {
	in       <-chan raft.RPC
	out      chan raft.RPC
	logs     raft.LogStore
	snapshot func() (index, term uint64, ok bool)
	mended   func(from, to uint64)
	bulk     *Bulk // the large entries that came beside their appends
}

func newGapBridge(in <-chan raft.RPC, logs raft.LogStore, snapshots raft.SnapshotStore, mended func(from, to uint64)) *GapBridge {
	return &GapBridge{in: in, out: make(chan raft.RPC), logs: logs, mended: mended,
		snapshot: func() (uint64, uint64, bool) {
			metas, err := snapshots.List()
			if err != nil || len(metas) == 0 {
				return 0, 0, false
			}
			return metas[0].Index, metas[0].Term, true
		}}
}

// Out is the RPCs for raft: the transport's Consumer.
func (b *GapBridge) Out() <-chan raft.RPC { return b.out }

// Run passes the RPCs on until closing closes.
func (b *GapBridge) Run(closing <-chan struct{}) {
	for {
		select {
		case rpc := <-b.in:
			if a, ok := rpc.Command.(*raft.AppendEntriesRequest); ok {
				if err := b.bulk.restore(a); err != nil {
					// The leader sends the entry and the append again.
					rpc.Respond(nil, err)
					continue
				}
				from := a.PrevLogEntry
				if mendSnapshotGap(a, b.logs, b.snapshot) && b.mended != nil {
					b.mended(from, a.PrevLogEntry)
				}
			}
			select {
			case b.out <- rpc:
			case <-closing:
				return
			}
		case <-closing:
			return
		}
	}
}
