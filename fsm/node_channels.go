package fsm

import (
	"cmp"
	"slices"

	"github.com/raftmq/raftmq/proto"
)

// NodeChannel is what a log holds of one channel of a node: its
// consumers, and the deliveries to them not yet settled, ascending by
// tag, as Deliver handed them (basic.get's are not among them: they went
// back as results).
type NodeChannel struct {
	Ref        *proto.ChannelRef
	Consumers  []*proto.ConsumerRef
	Deliveries []*Delivery
}

// NodeChannels lists the channels of node the state holds, by key. A node
// that does not run this log learns its effects from a member that does
// (a stream): when it connects again after a break, this is what it may
// have missed. Bodies the state does not hold inline are left to read
// (BodyRef), as for Deliver.
func (m *Machine) NodeChannels(node string) []NodeChannel {
	var out []NodeChannel
	for _, ch := range m.channels {
		if ch.ref.GetNode() != node {
			continue
		}
		nc := NodeChannel{Ref: ch.ref}
		for _, c := range ch.consumers {
			if !c.gone {
				nc.Consumers = append(nc.Consumers, c.ref)
			}
		}
		for _, u := range ch.unacked {
			if u.c == nil || u.c.gone {
				continue
			}
			d := &Delivery{Consumer: u.c.ref, DeliveryTag: u.tag, Redelivered: u.m.Redelivered, Exchange: u.m.Exchange,
				RoutingKey: u.m.RoutingKey, Properties: deliveryProps(u.q, u.m), BodyRef: u.m.Body, Deadline: u.m.Deadline,
				Group: m.groups.id}
			d.Body, _ = u.m.Inline()
			nc.Deliveries = append(nc.Deliveries, d)
		}
		out = append(out, nc)
	}
	slices.SortFunc(out, func(a, b NodeChannel) int { return cmp.Compare(chanKey(a.Ref), chanKey(b.Ref)) })
	return out
}
