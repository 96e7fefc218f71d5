package group

import "github.com/hashicorp/raft"

// maxAppendBytes bounds the entry data of one append a leader sends a
// follower. raft batches up to MaxAppendEntries entries per round trip
// whatever their size, and the transport gives a round trip 10 s: a
// follower behind by a few large publishes was sent them all at once,
// and the round trip failed and was retried whole. The entries past the
// budget are left for the next round trip (raft takes the last entry sent
// as the follower's progress); the first always goes.
const maxAppendBytes = 64 << 20

// NoPipeline is the raft transport without pipelined replication. In
// hashicorp/raft v1.7.3 a deposed leader's pipelined replication can block
// for ever (its response decoder stops on a stale term while requests are
// in flight), and then Shutdown never returns. Without the pipeline a
// follower gets one batch (up to MaxAppendEntries entries) per round trip.
type NoPipeline struct {
	*raft.NetworkTransport
	// Bulk, when set, carries large entries beside the append (bulk.go).
	Bulk *Bulk
	// Quiet, when set, answers an idle group's repeated appends without
	// sending them (quietappends.go).
	Quiet *QuietAppends
	// News, when set, hears what each follower took and tells followers
	// of a commit at the end of a burst (commitnews.go).
	News *CommitNews
}

// AppendEntriesPipeline implements raft.Transport: not supported.
func (NoPipeline) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

// AppendEntries implements raft.Transport with the byte budget.
func (t NoPipeline) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	_, err := t.Append(id, target, args, resp)
	return err
}

// Append is AppendEntries that also reports whether the follower was
// asked: false when Quiet answered a repeat from its last answer.
func (t NoPipeline) Append(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (asked bool, _ error) {
	if t.Quiet.answer(id, args, resp) {
		return false, nil
	}
	at := t.Quiet.sentAt()
	err := t.send(id, target, args, resp)
	t.Quiet.record(id, at, args, resp, err)
	t.News.record(id, target, args, resp, err)
	return true, err
}

func (t NoPipeline) send(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	args.Entries = appendBudget(args.Entries, maxAppendBytes)
	if t.Bulk != nil && len(args.Entries) > 0 {
		// raft keeps args: the append sent is a copy with the large
		// entries' data left out.
		a := *args
		a.Entries = t.Bulk.Strip(target, args.Entries)
		args = &a
	}
	return t.NetworkTransport.AppendEntries(id, target, args, resp)
}

// appendBudget is the longest prefix of entries, at least one, whose data
// fits budget.
func appendBudget(entries []*raft.Log, budget int) []*raft.Log {
	total := 0
	for i, e := range entries {
		total += len(e.Data)
		if total > budget && i > 0 {
			return entries[:i]
		}
	}
	return entries
}
