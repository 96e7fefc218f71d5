package ops

import (
	"context"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// Listing delayed messages: Machine.Delayed walks the delayed heap from
// its earliest message, so the cost of a listing grows with how deep it
// reaches (offset + limit), which MaxDelayedListing bounds.
const (
	DefaultDelayedLimit = 100
	MaxDelayedListing   = 10000
)

// delayedExchange is the x-delayed-message exchange name in vhost, or the
// error a front end answers when there is none: NotFound for no such
// exchange, Precondition for one of another type.
func delayedExchange(st State, vhost, name string) (*proto.ExchangeInfo, error) {
	for _, x := range st.Exchanges(vhost) {
		if x.GetName() != name {
			continue
		}
		if x.GetType() != fsm.DelayedExchangeType {
			return nil, &Error{Kind: Precondition, Text: "exchange '" + name + "' in vhost '" + vhost + "' is not an x-delayed-message exchange"}
		}
		return x, nil
	}
	return nil, &Error{Kind: NotFound, Text: "no exchange '" + name + "' in vhost '" + vhost + "'"}
}

// ListDelayedMessages answers raftmq.v1.Admin's ListDelayedMessages from
// the local state: the messages waiting in one delayed exchange (or all of
// them), earliest due first, offset skipped, at most limit.
func (s *Service) ListDelayedMessages(_ context.Context, req *proto.ListDelayedMessagesRequest) (*proto.ListDelayedMessagesResponse, error) {
	limit, offset := req.GetLimit(), req.GetOffset()
	if limit == 0 {
		limit = DefaultDelayedLimit
	}
	if uint64(limit)+uint64(offset) > MaxDelayedListing {
		return nil, fail(Invalid, "a listing of delayed messages reaches the earliest %d at most, not %d (offset %d + limit %d)",
			MaxDelayedListing, uint64(limit)+uint64(offset), offset, limit)
	}
	vhost, exchange := req.GetVhost(), req.GetExchange()
	if exchange != "" {
		vhost = orDefaultVhost(vhost)
	}
	var out *proto.ListDelayedMessagesResponse
	var err error
	s.node.View(func(st State) {
		out = &proto.ListDelayedMessagesResponse{}
		if exchange != "" {
			var x *proto.ExchangeInfo
			if x, err = delayedExchange(st, vhost, exchange); err != nil {
				return
			}
			out.Total = x.GetMessagesDelayed()
		} else {
			for _, x := range st.Exchanges(vhost) {
				out.Total += x.GetMessagesDelayed()
			}
		}
		l := st.Delayed(vhost, exchange, int(offset+limit))
		if int(offset) < len(l) {
			out.Messages = l[offset:]
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// CancelDelayedMessage answers raftmq.v1.Admin's CancelDelayedMessage:
// CancelDelayed through the log.
func (s *Service) CancelDelayedMessage(ctx context.Context, req *proto.CancelDelayedMessageRequest) (*proto.CancelDelayedMessageResponse, error) {
	if req.GetExchange() == "" || req.GetSeq() == 0 {
		return nil, fail(Invalid, "a delayed message is named by its exchange and a sequence number above 0")
	}
	vhost := orDefaultVhost(req.GetVhost())
	if err := s.checkDelayed(vhost, req.GetExchange()); err != nil {
		return nil, err
	}
	if _, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_CancelDelayed{CancelDelayed: &proto.CancelDelayed{
		Vhost: vhost, Exchange: req.GetExchange(), Seq: req.GetSeq()}}}); err != nil {
		return nil, err
	}
	return &proto.CancelDelayedMessageResponse{}, nil
}

// PurgeDelayedMessages answers raftmq.v1.Admin's PurgeDelayedMessages:
// PurgeDelayed through the log, one small entry however many wait.
func (s *Service) PurgeDelayedMessages(ctx context.Context, req *proto.PurgeDelayedMessagesRequest) (*proto.PurgeDelayedMessagesResponse, error) {
	if req.GetExchange() == "" {
		return nil, fail(Invalid, "exchange name must not be empty")
	}
	vhost := orDefaultVhost(req.GetVhost())
	if err := s.checkDelayed(vhost, req.GetExchange()); err != nil {
		return nil, err
	}
	r, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_PurgeDelayed{PurgeDelayed: &proto.PurgeDelayed{
		Vhost: vhost, Exchange: req.GetExchange()}}})
	if err != nil {
		return nil, err
	}
	return &proto.PurgeDelayedMessagesResponse{MessageCount: r.GetMessageCount()}, nil
}

// checkDelayed answers for a missing or other exchange before a command
// is proposed, so that both are told apart as a listing tells them; the
// log decides again when it applies the command.
func (s *Service) checkDelayed(vhost, name string) error {
	var err error
	s.node.LocalView(func(st State) { _, err = delayedExchange(st, vhost, name) })
	return err
}
