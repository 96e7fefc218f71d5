package mgmt

import (
	"net/http"
	"strconv"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// ---- delayed messages of x-delayed-message exchanges ----
//
//	GET    /api/exchanges/{vhost}/{name}/delayed?page=&page_size=  a page, earliest due first
//	DELETE /api/exchanges/{vhost}/{name}/delayed                   purge them all
//	DELETE /api/exchanges/{vhost}/{name}/delayed/{seq}             cancel one
//
// Each needs the user's read permission on the exchange, as reading or
// purging a queue's messages does on the queue.

// delayedExchangeJSON adds what a delayed exchange holds to its object:
// the messages waiting and when the earliest is due (null for none).
func delayedExchangeJSON(x *proto.ExchangeInfo, out map[string]any) {
	if x.GetType() != fsm.DelayedExchangeType {
		return
	}
	out["messages_delayed"] = x.GetMessagesDelayed()
	out["next_delayed_due"] = optTime(x.GetNextDelayedDueMs())
}

func delayedMessageJSON(d *proto.DelayedMessageInfo) map[string]any {
	headers := map[string]any{}
	if h := d.GetProperties().GetHeaders(); h != nil {
		headers = proto.TableJSON(h)
	}
	return map[string]any{
		"seq": d.GetSeq(), "vhost": d.GetVhost(), "exchange": d.GetExchange(), "routing_key": d.GetRoutingKey(),
		"delayed_at": optTime(d.GetDelayedMs()), "due": optTime(d.GetDueMs()), "due_ms": d.GetDueMs(),
		"headers": headers, "properties": propertiesJSON(d.GetProperties()), "payload_bytes": d.GetBodySize(),
	}
}

// delayedMessages serves GET (a page) and DELETE (purge) of an exchange's
// delayed messages.
func (q *req) delayedMessages() error {
	vhost, name, err := q.object()
	if err != nil {
		return err
	}
	name = wireExchange(name)
	if e := q.user.may(vhost, permRead, "exchange", name); e != nil {
		return e
	}
	if q.r.Method == http.MethodDelete {
		r, err := q.m.ops.PurgeDelayedMessages(q.ctx, &proto.PurgeDelayedMessagesRequest{Vhost: vhost, Exchange: name})
		if err != nil {
			return err
		}
		q.ok(map[string]any{"message_count": r.GetMessageCount()})
		return nil
	}
	return q.delayedPage(vhost, name)
}

// delayedMessage serves DELETE of one delayed message (cancel).
func (q *req) delayedMessage() error {
	vhost, name, err := q.object()
	if err != nil {
		return err
	}
	name = wireExchange(name)
	if e := q.user.may(vhost, permRead, "exchange", name); e != nil {
		return e
	}
	seq := q.arg("seq")
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil || n == 0 {
		return badRequest("%q is not the sequence number of a delayed message", seq)
	}
	if _, err := q.m.ops.CancelDelayedMessage(q.ctx, &proto.CancelDelayedMessageRequest{Vhost: vhost, Exchange: name, Seq: n}); err != nil {
		return err
	}
	q.noContent()
	return nil
}

// delayedPage answers a page of the delayed messages in RabbitMQ's page
// object. A page reaches the earliest ops.MaxDelayedListing at most.
func (q *req) delayedPage(vhost, name string) error {
	qs := q.r.URL.Query()
	page, size := 1, defaultPageSize
	var err error
	if s := qs.Get("page"); s != "" {
		page, err = strconv.Atoi(s)
	}
	if s := qs.Get("page_size"); s != "" && err == nil {
		size, err = strconv.Atoi(s)
	}
	if err != nil || page < 1 || size < 1 || size > maxPageSize {
		return badRequest("page must be at least 1 and page_size between 1 and %d", maxPageSize)
	}
	if page*size > ops.MaxDelayedListing {
		return badRequest("page %d of %d reaches beyond the earliest %d delayed messages, which is as far as a listing goes", page, size, ops.MaxDelayedListing)
	}
	r, err := q.m.ops.ListDelayedMessages(q.ctx, &proto.ListDelayedMessagesRequest{Vhost: vhost, Exchange: name,
		Offset: uint32((page - 1) * size), Limit: uint32(size)})
	if err != nil {
		return err
	}
	total := int(r.GetTotal())
	pages := (total + size - 1) / size
	if page > max(pages, 1) {
		return badRequest("page %d is beyond the last page, %d", page, pages)
	}
	items := make([]map[string]any, 0, len(r.GetMessages()))
	for _, d := range r.GetMessages() {
		items = append(items, delayedMessageJSON(d))
	}
	q.ok(map[string]any{
		"items": items, "item_count": len(items), "page": page, "page_size": size,
		"page_count": pages, "filtered_count": total, "total_count": total,
	})
	return nil
}
