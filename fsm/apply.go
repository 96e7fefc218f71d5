package fsm

import (
	"fmt"

	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

// UnknownCommandError is an entry holding a command of a kind this binary
// does not know and may not skip: a newer version wrote it.
type UnknownCommandError struct {
	Index    uint64 // the entry's log index
	Position int    // the command's position in the entry
}

func (e *UnknownCommandError) Error() string {
	return fmt.Sprintf("fsm: log entry %d, command %d: a command kind this version (protocol %d) does not know, written by a newer version",
		e.Index, e.Position, Protocol)
}

// LevelError is an entry raising the log's protocol level above what
// this binary applies: a newer version wrote it, and the entries after it
// mean what that level defines.
type LevelError struct {
	Index    uint64 // the entry's log index
	Position int    // the command's position in the entry
	Level    uint32
}

func (e *LevelError) Error() string {
	return fmt.Sprintf("fsm: log entry %d, command %d: raises the protocol level to %d, and this version applies up to %d; written by a newer version",
		e.Index, e.Position, e.Level, Protocol)
}

// CheckEntry reports whether every command of an entry can be applied by
// this binary. A command of no kind this binary knows, carrying fields it
// does not know and not marked ignorable, was written by a newer version:
// applying the entry without it would make this replica diverge, so the
// node must stop. A command of no kind and no unknown fields is an empty
// command, which apply refuses like every replica does. A SetProtocol to
// a level above Protocol stops the node too: applying the entries after
// it with this binary's behaviour would diverge as well.
func CheckEntry(e Entry) error {
	for i, c := range e.Envelope.GetCommands() {
		// GetCmd is nil exactly when no kind is set (WhichOneof, without
		// reflection: every replica checks every command).
		if c.GetCmd() == nil && !c.GetIgnorable() && len(c.ProtoReflect().GetUnknown()) > 0 {
			return &UnknownCommandError{Index: e.Index, Position: i}
		}
		if l := c.GetSetProtocol().GetLevel(); l > Protocol {
			return &LevelError{Index: e.Index, Position: i, Level: l}
		}
	}
	return nil
}

func (s *state) apply(e Entry, sink Sink) []*proto.Result {
	if sink == nil {
		sink = DiscardSink{}
	}
	s.sink = sink
	defer func() { s.sink = nil }()
	if st := e.Envelope.GetStampMs(); st > s.clock {
		s.clock = st
	}
	s.index = e.Index
	out := make([]*proto.Result, len(e.Envelope.GetCommands()))
	for i, c := range e.Envelope.GetCommands() {
		s.pos = uint32(i)
		if mirrored(c) {
			s.settingsGen = settingsGens.Add(1)
		}
		r := s.applyOne(c)
		if r == nil {
			r = &proto.Result{}
		}
		r.Index = e.Index
		out[i] = r
	}
	if checkHook != nil {
		checkHook(s)
	}
	return out
}

// checkHook lets tests check the state after every applied entry and
// every restore.
var checkHook func(s *state)

// applySetProtocol raises the log's protocol level; a lower level than
// the log's (a second leader proposing what the first already did)
// changes nothing. A level above this binary's is refused without a
// change: the node never gets here (CheckEntry stops it before the
// entry), and a Machine used without CheckEntry must not claim a level
// whose behaviour it does not know.
func (s *state) applySetProtocol(c *proto.SetProtocol) *proto.Result {
	if l := c.GetLevel(); l > Protocol {
		return refused(replycode.NotImplemented, fmt.Sprintf("NOT_IMPLEMENTED - protocol level %d is above %d, the highest this node applies", l, Protocol))
	}
	if s.level < levelConsumerTimeout && c.GetLevel() >= levelConsumerTimeout {
		s.startConsumerTimeouts()
	}
	s.level = max(s.level, c.GetLevel())
	return &proto.Result{}
}

// applyOne is the only dispatch over the Command oneof.
func (s *state) applyOne(c *proto.Command) *proto.Result {
	if r := shapeError(c); r != nil {
		return r
	}
	switch x := c.GetCmd().(type) {
	case *proto.Command_VhostPut:
		return s.applyVhostPut(x.VhostPut)
	case *proto.Command_VhostDelete:
		return s.applyVhostDelete(x.VhostDelete)
	case *proto.Command_UserPut:
		return s.applyUserPut(x.UserPut)
	case *proto.Command_UserDelete:
		return s.applyUserDelete(x.UserDelete)
	case *proto.Command_PermissionSet:
		return s.applyPermissionSet(x.PermissionSet)
	case *proto.Command_PermissionClear:
		return s.applyPermissionClear(x.PermissionClear)
	case *proto.Command_ExchangeDeclare:
		return s.applyExchangeDeclare(x.ExchangeDeclare)
	case *proto.Command_ExchangeDelete:
		return s.applyExchangeDelete(x.ExchangeDelete)
	case *proto.Command_QueueDeclare:
		return s.applyQueueDeclare(x.QueueDeclare)
	case *proto.Command_QueueDelete:
		return s.applyQueueDelete(x.QueueDelete)
	case *proto.Command_QueuePurge:
		return s.applyQueuePurge(x.QueuePurge)
	case *proto.Command_Bind:
		return s.applyBind(x.Bind)
	case *proto.Command_Unbind:
		return s.applyUnbind(x.Unbind)
	case *proto.Command_Publish:
		return s.applyPublish(x.Publish)
	case *proto.Command_Get:
		return s.applyGet(x.Get)
	case *proto.Command_Consume:
		return s.applyConsume(x.Consume)
	case *proto.Command_Cancel:
		return s.applyCancel(x.Cancel)
	case *proto.Command_Credit:
		return s.applyCredit(x.Credit)
	case *proto.Command_Settle:
		return s.applySettle(x.Settle)
	case *proto.Command_Requeue:
		return s.applyRequeue(x.Requeue)
	case *proto.Command_Discard:
		return s.applyDiscard(x.Discard)
	case *proto.Command_ChannelClosed:
		return s.applyChannelClosed(x.ChannelClosed)
	case *proto.Command_ConnectionClosed:
		return s.applyConnectionClosed(x.ConnectionClosed)
	case *proto.Command_NodeDown:
		return s.applyNodeDown(x.NodeDown)
	case *proto.Command_Expire:
		return s.applyExpire(x.Expire)
	case *proto.Command_ExpireQueue:
		return s.applyExpireQueue(x.ExpireQueue)
	case *proto.Command_Tick:
		return &proto.Result{}
	case *proto.Command_RestartLeases:
		return s.applyRestartLeases()
	case *proto.Command_PolicySet:
		return s.applyPolicySet(x.PolicySet)
	case *proto.Command_PolicyClear:
		return s.applyPolicyClear(x.PolicyClear)
	case *proto.Command_VhostLimits:
		return s.applyVhostLimits(x.VhostLimits)
	case *proto.Command_QueueGroups:
		return s.applyQueueGroups(x.QueueGroups)
	case *proto.Command_GroupMembers:
		return s.applyGroupMembers(x.GroupMembers)
	case *proto.Command_PlaceQueues:
		return s.applyPlaceQueues()
	case *proto.Command_QueueLeaseEnded:
		return s.applyQueueLeaseEnded(x.QueueLeaseEnded)
	case *proto.Command_SetProtocol:
		return s.applySetProtocol(x.SetProtocol)
	case *proto.Command_ConsumerTimeout:
		return s.applyConsumerTimeout(x.ConsumerTimeout)
	case *proto.Command_ReleaseDelayed:
		return s.applyReleaseDelayed(x.ReleaseDelayed)
	case *proto.Command_CancelDelayed:
		return s.applyCancelDelayed(x.CancelDelayed)
	case *proto.Command_PurgeDelayed:
		return s.applyPurgeDelayed(x.PurgeDelayed)
	case *proto.Command_GroupInit:
		return s.applyGroupInit(x.GroupInit)
	case *proto.Command_Enqueue:
		return s.applyEnqueue(x.Enqueue)
	case *proto.Command_HandOff:
		return s.applyHandOff(x.HandOff)
	case *proto.Command_HandOffDone:
		return s.applyHandOffDone(x.HandOffDone)
	default:
		if c.GetIgnorable() {
			return &proto.Result{}
		}
		// A command of a kind a newer version knows never gets here: the
		// node checks entries with CheckEntry and stops before applying
		// one. What is left has no kind at all (an earlier leader took
		// any command): it changes nothing, on every replica alike.
		return malformed("command of no kind").Result()
	}
}
