package ops

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// The operations below have no gRPC method of their own; the management
// HTTP API and the definitions import call them, so each write exists once
// and goes through the same submit (and its error mapping) as the gRPC
// methods.

// BatchSubmitter is implemented by a Node that can put several commands in
// one log entry; GetMessages uses it so that a management "get" never
// leaves its deliveries half settled.
type BatchSubmitter interface {
	SubmitBatch(ctx context.Context, cmds []*proto.Command) ([]*proto.Result, error)
}

// DeclareQueue declares a queue (not exclusive: an HTTP client owns no
// connection) and returns the command's result.
func (s *Service) DeclareQueue(ctx context.Context, d *proto.QueueDeclare) (*proto.Result, error) {
	if d.GetName() == "" {
		return nil, fail(Invalid, "queue name must not be empty")
	}
	d.Vhost = orDefaultVhost(d.GetVhost())
	return s.submit(ctx, &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: d}})
}

// DeclareExchange declares an exchange.
func (s *Service) DeclareExchange(ctx context.Context, d *proto.ExchangeDeclare) error {
	if d.GetName() == "" {
		return fail(Invalid, "exchange name must not be empty")
	}
	d.Vhost = orDefaultVhost(d.GetVhost())
	_, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: d}})
	return err
}

// DeleteExchange deletes an exchange.
func (s *Service) DeleteExchange(ctx context.Context, vhost, name string, ifUnused bool) error {
	_, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_ExchangeDelete{ExchangeDelete: &proto.ExchangeDelete{
		Vhost: orDefaultVhost(vhost), Name: name, IfUnused: ifUnused,
	}}})
	return err
}

// Bind binds a queue or an exchange to an exchange.
func (s *Service) Bind(ctx context.Context, b *proto.Bind) error {
	b.Vhost = orDefaultVhost(b.GetVhost())
	_, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_Bind{Bind: b}})
	return err
}

// Unbind removes a binding.
func (s *Service) Unbind(ctx context.Context, b *proto.Unbind) error {
	b.Vhost = orDefaultVhost(b.GetVhost())
	_, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_Unbind{Unbind: b}})
	return err
}

// Publish publishes one message and reports whether it reached a queue.
// The node's incoming interceptors stamp it as they stamp an AMQP publish.
func (s *Service) Publish(ctx context.Context, p *proto.Publish) (routed bool, err error) {
	p.Vhost = orDefaultVhost(p.GetVhost())
	if s.intercept != nil {
		if p.Properties, err = s.intercept(p.GetProperties()); err != nil {
			return false, fail(Invalid, "message properties: %v", err)
		}
	}
	r, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_Publish{Publish: p}})
	if err != nil {
		return false, err
	}
	return r.GetRouted(), nil
}

// GetMessages takes up to count messages from a queue. With requeue they
// are put back (marked redelivered, as RabbitMQ's ack_requeue_true does);
// without, they are gone. The gets and the close of the channel they used
// travel in one log entry when the node can batch, so no delivery stays
// pending on a channel nobody holds.
func (s *Service) GetMessages(ctx context.Context, vhost, queue string, count int, requeue bool) ([]*proto.GetOk, error) {
	if count < 1 {
		count = 1
	}
	id := make([]byte, 8)
	if _, err := rand.Read(id); err != nil {
		return nil, fail(Internal, "channel id: %v", err)
	}
	ch := &proto.ChannelRef{Node: s.node.NodeID(), Connection: "mgmt-" + hex.EncodeToString(id), Channel: 1}
	cmds := make([]*proto.Command, 0, count+1)
	for range count {
		cmds = append(cmds, &proto.Command{Cmd: &proto.Command_Get{Get: &proto.Get{
			Vhost: orDefaultVhost(vhost), Queue: queue, NoAck: !requeue, Channel: ch,
		}}})
	}
	cmds = append(cmds, &proto.Command{Cmd: &proto.Command_ChannelClosed{ChannelClosed: &proto.ChannelClosed{Channel: ch}}})
	var results []*proto.Result
	if b, ok := s.node.(BatchSubmitter); ok {
		rs, err := b.SubmitBatch(ctx, cmds)
		if err != nil {
			return nil, nodeError(err, Unavailable, "submit")
		}
		results = rs
	} else {
		for _, c := range cmds {
			r, err := s.node.Submit(ctx, c)
			if err != nil {
				return nil, nodeError(err, Unavailable, "submit")
			}
			results = append(results, r)
		}
	}
	var out []*proto.GetOk
	for _, r := range results[:count] {
		if err := refusal(r); err != nil {
			return nil, err
		}
		if g := r.GetGet(); g != nil {
			out = append(out, g)
		}
	}
	return out, nil
}

// PutUser writes a user with a password hash made elsewhere (a definitions
// import carries RabbitMQ's own hashes, which raftmq checks the same way).
func (s *Service) PutUser(ctx context.Context, name string, hash []byte, algorithm string, tags []string) error {
	if name == "" {
		return fail(Invalid, "user name must not be empty")
	}
	_, err := s.submit(ctx, &proto.Command{Cmd: &proto.Command_UserPut{UserPut: &proto.UserPut{
		Name: name, PasswordHash: hash, HashAlgorithm: algorithm, Tags: tags,
	}}})
	return err
}

// AddUserOrReplace writes a user with a new salted hash of password,
// whether it exists or not (the management API's PUT /api/users/u; the
// gRPC AddUser refuses an existing user).
func (s *Service) AddUserOrReplace(ctx context.Context, name, password string, tags []string) (bool, error) {
	hash, err := hashPassword(password)
	if err != nil {
		return false, err
	}
	return true, s.PutUser(ctx, name, hash, fsm.PasswordHashAlgorithm, tags)
}
