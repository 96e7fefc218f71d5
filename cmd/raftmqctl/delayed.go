package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/raftmq/raftmq/proto"
)

// The messages waiting in x-delayed-message exchanges: list them, cancel
// one, purge them all (the delayed-message plugin offers a count only).

// delayedOptions are the flags of list_delayed_messages.
type delayedOptions struct {
	limit, offset uint
}

// delayedFlags declares them on fs.
func delayedFlags(fs *flag.FlagSet, o *delayedOptions) {
	fs.UintVar(&o.limit, "limit", 100, "list_delayed_messages: at most this many (offset + limit up to 10000)")
	fs.UintVar(&o.offset, "offset", 0, "list_delayed_messages: skip this many of the earliest")
}

func init() {
	verbs["list_delayed_messages"] = verb{args: "[-p vhost] EXCHANGE [column ...] [--limit N] [--offset N]", min: 1, max: -1,
		run: listDelayed, columns: columnNames(delayedColumns), defaults: delayedDefaults,
		help: "The messages waiting in an x-delayed-message exchange, earliest due first: the earliest\n" +
			"--limit (default 100) after --offset; a listing reaches the earliest 10000 at most.\n" +
			"seq names a message for cancel_delayed_message."}
	verbs["cancel_delayed_message"] = verb{args: "[-p vhost] EXCHANGE SEQ", min: 2, max: 2, pre: checkSeq, run: cancelDelayed,
		help: "Drops one waiting message of an x-delayed-message exchange (seq from list_delayed_messages)."}
	verbs["purge_delayed_messages"] = verb{args: "[-p vhost] EXCHANGE", min: 1, max: 1, run: purgeDelayed,
		help: "Drops every message waiting in an x-delayed-message exchange."}

	// list_exchanges shows what each delayed exchange holds.
	exchangeColumns = append(exchangeColumns,
		column[*proto.ExchangeInfo]{"messages_delayed", func(x *proto.ExchangeInfo) any { return x.GetMessagesDelayed() }},
		column[*proto.ExchangeInfo]{"next_delayed_due", func(x *proto.ExchangeInfo) any { return msTime(x.GetNextDelayedDueMs()) }})
	v := verbs["list_exchanges"]
	v.columns = columnNames(exchangeColumns)
	verbs["list_exchanges"] = v
}

// msTime is a log time (unix ms) as RFC 3339 text, "" for none.
func msTime(ms int64) string {
	if ms <= 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

var delayedDefaults = []string{"seq", "due", "routing_key", "payload_bytes", "headers"}

var delayedColumns = []column[*proto.DelayedMessageInfo]{
	{"seq", func(d *proto.DelayedMessageInfo) any { return d.GetSeq() }},
	{"due", func(d *proto.DelayedMessageInfo) any { return msTime(d.GetDueMs()) }},
	{"delayed_at", func(d *proto.DelayedMessageInfo) any { return msTime(d.GetDelayedMs()) }},
	{"routing_key", func(d *proto.DelayedMessageInfo) any { return d.GetRoutingKey() }},
	{"payload_bytes", func(d *proto.DelayedMessageInfo) any { return d.GetBodySize() }},
	{"headers", func(d *proto.DelayedMessageInfo) any { return headersText(d.GetProperties().GetHeaders()) }},
	{"exchange", func(d *proto.DelayedMessageInfo) any { return d.GetExchange() }},
	{"vhost", func(d *proto.DelayedMessageInfo) any { return d.GetVhost() }},
}

// headersText is a message's headers as one line of JSON.
func headersText(h *proto.Table) string {
	b, err := json.Marshal(proto.TableJSON(h))
	if err != nil || h == nil {
		return "{}"
	}
	return string(b)
}

func checkSeq(_ *options, args []string) error {
	if n, err := strconv.ParseUint(args[1], 10, 64); err != nil || n == 0 {
		return usagef("%q is not the sequence number of a delayed message", args[1])
	}
	return nil
}

func listDelayed(c *call) error {
	if c.o.delayed.limit == 0 || c.o.delayed.limit+c.o.delayed.offset > 10000 {
		return usagef("--limit must be at least 1, and --offset + --limit at most 10000")
	}
	exchange := c.args[0]
	r, err := c.c.ListDelayedMessages(c.ctx, &proto.ListDelayedMessagesRequest{Vhost: c.o.vhost, Exchange: exchange,
		Limit: uint32(c.o.delayed.limit), Offset: uint32(c.o.delayed.offset)})
	if err != nil {
		return err
	}
	c.inform("Listing delayed messages of exchange %q in vhost %q (%d waiting) ...", exchange, c.o.vhost, r.GetTotal())
	c.args = c.args[1:]
	return listing(c, r.GetMessages(), delayedColumns, delayedDefaults)
}

func cancelDelayed(c *call) error {
	seq, _ := strconv.ParseUint(c.args[1], 10, 64)
	if _, err := c.c.CancelDelayedMessage(c.ctx, &proto.CancelDelayedMessageRequest{Vhost: c.o.vhost, Exchange: c.args[0], Seq: seq}); err != nil {
		return err
	}
	return c.done(fmt.Sprintf("Cancelled delayed message %d of exchange %q in vhost %q", seq, c.args[0], c.o.vhost), nil)
}

func purgeDelayed(c *call) error {
	r, err := c.c.PurgeDelayedMessages(c.ctx, &proto.PurgeDelayedMessagesRequest{Vhost: c.o.vhost, Exchange: c.args[0]})
	if err != nil {
		return err
	}
	return c.done(fmt.Sprintf("Purged %d delayed messages from exchange %q in vhost %q", r.GetMessageCount(), c.args[0], c.o.vhost),
		map[string]any{"message_count": r.GetMessageCount()})
}
