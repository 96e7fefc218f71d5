package amqp

import (
	"fmt"
	"slices"
	"time"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/proto"
)

// Stamp is how one of RabbitMQ's incoming message interceptors
// (rabbitmq.conf message_interceptors.incoming.*) is configured: off, or
// on with its overwrite setting.
type Stamp uint8

const (
	// StampOff adds nothing (RabbitMQ's default: the interceptor not
	// configured).
	StampOff Stamp = iota
	// StampKeep adds the value unless the publisher set it (overwrite =
	// false).
	StampKeep
	// StampOverwrite adds the value in place of the publisher's
	// (overwrite = true).
	StampOverwrite
)

// ParseStamp reads a stamp setting: off, keep (RabbitMQ's overwrite =
// false) or overwrite.
func ParseStamp(s string) (Stamp, error) {
	switch s {
	case "", "off":
		return StampOff, nil
	case "keep":
		return StampKeep, nil
	case "overwrite":
		return StampOverwrite, nil
	}
	return StampOff, fmt.Errorf("%q is not off, keep or overwrite", s)
}

// MarshalText and UnmarshalText make a Stamp a flag's value.
func (s Stamp) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

func (s *Stamp) UnmarshalText(b []byte) error {
	v, err := ParseStamp(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

func (s Stamp) String() string {
	switch s {
	case StampKeep:
		return "keep"
	case StampOverwrite:
		return "overwrite"
	}
	return "off"
}

// The headers the incoming interceptors add, named as RabbitMQ names them
// for AMQP 0-9-1 clients.
const (
	// headerReceivedAt is the time the publish reached the node, in ms
	// since the epoch (the name of the former message timestamp plugin).
	headerReceivedAt = "timestamp_in_ms"
	// headerRoutedBy names the node that received and routed it.
	headerRoutedBy = "x-routed-by"
)

// takePublish is what a publish gets as the channel takes it, before it
// is routed or buffered in a transaction: its direct reply-to name, then
// the interceptors' values.
func (ch *channel) takePublish(it *item) *wire.Error {
	if e := ch.rewriteReplyTo(it); e != nil {
		return e
	}
	ch.intercept(it, time.Now())
	return nil
}

// intercept gives a publish the values the server's incoming interceptors
// add, before it is routed, as RabbitMQ's channel does (stamped). The
// publisher's properties are copied, never changed: a run's items may
// share them. The values are decided here, once, and travel in the
// publish: every replica holds the same message.
func (ch *channel) intercept(it *item, now time.Time) {
	srv := ch.c.srv
	if !srv.intercepting() {
		return
	}
	var p wire.Properties
	if it.props != nil {
		p = *it.props
	}
	p = srv.stamped(p, now)
	it.props = &p
}

// intercepting reports whether an incoming interceptor is on.
func (s *Server) intercepting() bool {
	return s.cfg.HeaderTimestamp != StampOff || s.cfg.HeaderRoutingNode != StampOff
}

// stamped returns p with the values of the server's incoming
// interceptors: with Config.HeaderTimestamp the time now the message
// reached this node (a timestamp_in_ms header in ms and the timestamp
// property in seconds), with Config.HeaderRoutingNode this node's id
// (x-routed-by). p's headers are copied before any is changed.
func (s *Server) stamped(p wire.Properties, now time.Time) wire.Properties {
	cfg := &s.cfg
	if p.Flags&wire.FlagHeaders != 0 {
		p.Headers = slices.Clone(p.Headers)
	}
	set := func(s Stamp, key string, v any) {
		i := slices.IndexFunc(p.Headers, func(f wire.Field) bool { return f.Key == key })
		switch {
		case s == StampOff || i >= 0 && s == StampKeep:
		case i >= 0:
			p.Headers[i].Value = v
		default:
			p.Headers = append(p.Headers, wire.Field{Key: key, Value: v})
			p.Flags |= wire.FlagHeaders
		}
	}
	set(cfg.HeaderTimestamp, headerReceivedAt, now.UnixMilli())
	if cfg.HeaderTimestamp == StampOverwrite || cfg.HeaderTimestamp == StampKeep && p.Flags&wire.FlagTimestamp == 0 {
		p.Timestamp = time.Unix(now.Unix(), 0)
		p.Flags |= wire.FlagTimestamp
	}
	if b := s.node(); b != nil {
		set(cfg.HeaderRoutingNode, headerRoutedBy, b.NodeID())
	}
	return p
}

// Intercept returns the properties of a message published on this node
// other than through AMQP (the management API's publish) with the values
// the incoming interceptors give an AMQP publish: RabbitMQ publishes
// those through a channel, so its interceptors stamp them too. p itself
// is not changed; with every interceptor off it is returned as it is.
func (s *Server) Intercept(p *proto.Properties) (*proto.Properties, error) {
	if !s.intercepting() {
		return p, nil
	}
	w := s.stamped(propertiesFromProto(p), time.Now())
	return propertiesToProto(&w)
}
