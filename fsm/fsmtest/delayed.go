package fsmtest

import "github.com/raftmq/raftmq/proto"

// ReleaseDelayed is the command a leader proposes once a delayed message
// is due, releasing at most limit of them.
func ReleaseDelayed(limit uint32) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_ReleaseDelayed{ReleaseDelayed: &proto.ReleaseDelayed{Limit: limit}}}
}
