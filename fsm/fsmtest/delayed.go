package fsmtest

import "github.com/raftmq/raftmq/proto"

// ReleaseDelayed is the command a leader proposes once a delayed message
// is due, releasing at most limit of them.
func ReleaseDelayed(limit uint32) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_ReleaseDelayed{ReleaseDelayed: &proto.ReleaseDelayed{Limit: limit}}}
}

// CancelDelayed is the command dropping delayed message seq of an
// exchange.
func CancelDelayed(vhost, exchange string, seq uint64) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_CancelDelayed{CancelDelayed: &proto.CancelDelayed{Vhost: vhost, Exchange: exchange, Seq: seq}}}
}

// PurgeDelayed is the command dropping every delayed message of an
// exchange.
func PurgeDelayed(vhost, exchange string) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_PurgeDelayed{PurgeDelayed: &proto.PurgeDelayed{Vhost: vhost, Exchange: exchange}}}
}
