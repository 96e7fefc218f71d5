package fsmtest

import "github.com/raftmq/raftmq/proto"

// GroupInit is the command making a log a queue group's.
func GroupInit(group uint32) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_GroupInit{GroupInit: &proto.GroupInit{Group: group}}}
}

// Enqueue is a publish a routing node resolved to queues of one group.
func Enqueue(vhost, exchange, key, body string, props *proto.Properties, queues ...string) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_Enqueue{Enqueue: &proto.Enqueue{Vhost: vhost, Exchange: exchange,
		RoutingKey: key, Properties: props, Body: []byte(body), Queues: queues}}}
}

// HandOffDone is the command forgetting a group's outbox up to a key.
func HandOffDone(upTo uint64) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_HandOffDone{HandOffDone: &proto.HandOffDone{UpTo: upTo}}}
}

// PlaceQueues is the command switching queue placement on in the
// metadata log.
func PlaceQueues() *proto.Command {
	return &proto.Command{Cmd: &proto.Command_PlaceQueues{PlaceQueues: &proto.PlaceQueues{}}}
}

// QueueLeaseEnded is the metadata log's delete of queue name of vhost,
// whose lease ended in group under the record placed at.
func QueueLeaseEnded(vhost, name, group string, at uint64) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_QueueLeaseEnded{QueueLeaseEnded: &proto.QueueLeaseEnded{
		Vhost: vhost, Name: name, Group: group, PlacedAt: at}}}
}
