package amqp

import (
	"slices"
	"time"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

// maxTxBatch bounds how many methods of one transaction go to the log in
// one SubmitBatch (one log entry). A larger transaction is committed in
// several entries, in order.
const maxTxBatch = 4096

// Transactions (the tx class). After tx.select the channel keeps its
// basic.publish, basic.ack, basic.nack and basic.reject in memory;
// tx.commit sends them to the log in order, as one entry where the
// transaction fits maxTxBatch, answers each (basic.return for an
// unroutable mandatory message) and then sends commit-ok; tx.rollback
// forgets them, so rolled-back acknowledgements leave their deliveries
// unacknowledged, as in RabbitMQ. A channel that closes forgets its
// uncommitted work the same way. An acknowledgement of a tag the client
// was never given is refused when it arrives, as in RabbitMQ (window.go).

func (ch *channel) handleTxSelect(m *wire.TxSelect) *wire.Error {
	if ch.confirm {
		return wire.ChanError(replycode.PreconditionFailed, m.ClassID(), m.MethodID(), "cannot switch from confirm to tx mode")
	}
	ch.tx = true
	ch.c.send(ch.id, &wire.TxSelectOk{})
	return nil
}

// bufferTx keeps a run of publishes or acknowledgements for tx.commit.
func (ch *channel) bufferTx(run []item) *wire.Error {
	for _, it := range run {
		if p, ok := it.m.(*wire.BasicPublish); ok {
			if p.Immediate {
				return wire.ConnError(replycode.NotImplemented, p.ClassID(), p.MethodID(), "immediate=true")
			}
			// As in RabbitMQ, a request's reply_to is taken (or refused)
			// and the interceptors' values given when it is published,
			// not at commit.
			if e := ch.takePublish(&it); e != nil {
				return e
			}
		}
		ch.txItems = append(ch.txItems, it)
	}
	return nil
}

func (ch *channel) handleTxCommit(m *wire.TxCommit) *wire.Error {
	if !ch.tx {
		return wire.ChanError(replycode.PreconditionFailed, m.ClassID(), m.MethodID(), "channel is not transactional")
	}
	items := ch.txItems
	ch.txItems = nil
	ref := ch.ref()
	for len(items) > 0 {
		n := min(len(items), maxTxBatch)
		if e := ch.commitTx(ref, items[:n]); e != nil {
			return e
		}
		items = items[n:]
	}
	ch.c.send(ch.id, &wire.TxCommitOk{})
	return nil
}

// commitTx sends part of a transaction to the log and answers it. Its
// replies to reply-to names reach their requesters once the rest of it
// committed: a rolled-back transaction sends none. The publishes and the
// acknowledgements of the metadata group's deliveries go as one batch, as
// before queue groups; those of another group's deliveries go to its log
// afterwards, one batch per group (no log entry spans two logs).
func (ch *channel) commitTx(ref *proto.ChannelRef, items []item) *wire.Error {
	cmds := make([]*proto.Command, 0, len(items))
	replies := make([]*proto.Publish, len(items))
	at := make([]int, len(items)) // each item's place in its group's batch
	var groups []uint32           // the other groups, ascending
	others := map[uint32][]*proto.Command{}
	firstOf := map[uint32]wire.Method{}
	for i, it := range items {
		m, ok := it.m.(*wire.BasicPublish)
		if !ok && it.group != 0 {
			if _, seen := others[it.group]; !seen {
				groups = append(groups, it.group)
				firstOf[it.group] = it.m
			}
			at[i] = len(others[it.group])
			others[it.group] = append(others[it.group], it.cmd)
			continue
		}
		if !ok {
			at[i] = len(cmds)
			cmds = append(cmds, it.cmd) // translated by the reader (window.go)
			continue
		}
		cmd, e := ch.publishCommand(ref, it)
		if e != nil {
			return e
		}
		if isReplyRoute(m) {
			replies[i] = cmd.GetPublish()
			continue
		}
		at[i] = len(cmds)
		cmds = append(cmds, cmd)
	}
	results := map[uint32][]*proto.Result{}
	epoch := ch.c.srv.epoch()
	if len(cmds) > 0 {
		var err error
		if results[0], err = ch.submitBatch(cmds); err != nil {
			return ch.submitError(items[0].m, err)
		}
	}
	slices.Sort(groups)
	for _, g := range groups {
		var err error
		if results[g], err = ch.c.srv.submitTo(ch.c.ctx, g, others[g]); err != nil {
			return ch.submitError(firstOf[g], err)
		}
	}
	for i, it := range items {
		if replies[i] != nil {
			ch.sendReply(it, replies[i])
			continue
		}
		r := results[it.group][at[i]]
		if r.GetCode() != 0 {
			if e, handled := ch.takenBack(it); handled {
				if e != nil {
					return e
				}
				continue
			}
			return resultError(it.m, r)
		}
		if _, ok := it.m.(*wire.BasicPublish); ok {
			ch.returnUnroutable(it, r, epoch)
		}
	}
	ch.committedAcks(items, time.Now().UnixMilli())
	return nil
}

func (ch *channel) handleTxRollback(m *wire.TxRollback) *wire.Error {
	if !ch.tx {
		return wire.ChanError(replycode.PreconditionFailed, m.ClassID(), m.MethodID(), "channel is not transactional")
	}
	ch.txItems = nil
	ch.c.send(ch.id, &wire.TxRollbackOk{})
	return nil
}
