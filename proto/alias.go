package proto

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	gproto "google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// A follower decodes every log entry it applies, and proto.Unmarshal
// copies each bytes field: every message body a follower applies was
// allocated, copied and collected once more, though the state machine
// only takes its length (a queued message names its body by log index and
// position) and the entry's data outlives the decode anyway (the log
// cache holds it). UnmarshalEnvelope leaves the bodies where they are.

// The field numbers UnmarshalEnvelope follows, read from the generated
// descriptors so that they cannot drift from command.proto.
var (
	envVersion, envStamp, envCommands protowire.Number
	cmdIgnorable                      protowire.Number
	// bodyFields are the members of Command.cmd that UnmarshalEnvelope
	// decodes with their body aliased, and the body's field number in each.
	bodyFields map[protowire.Number]bodyField
)

type bodyField struct {
	body protowire.Number
	// decode unmarshals the member's message from the bytes either side
	// of its body field, sets the body and returns the member.
	decode func(before, after, body []byte) (isCommand_Cmd, error)
}

func init() {
	env := (&Envelope{}).ProtoReflect().Descriptor()
	envVersion, envStamp, envCommands = number(env, "version"), number(env, "stamp_ms"), number(env, "commands")
	cmd := (&Command{}).ProtoReflect().Descriptor()
	cmdIgnorable = number(cmd, "ignorable")
	bodyFields = map[protowire.Number]bodyField{
		number(cmd, "publish"): {body: number((&Publish{}).ProtoReflect().Descriptor(), "body"),
			decode: func(before, after, body []byte) (isCommand_Cmd, error) {
				p := &Publish{}
				err := unmarshalAround(p, before, after)
				p.Body = body
				return &Command_Publish{Publish: p}, err
			}},
		number(cmd, "enqueue"): {body: number((&Enqueue{}).ProtoReflect().Descriptor(), "body"),
			decode: func(before, after, body []byte) (isCommand_Cmd, error) {
				e := &Enqueue{}
				err := unmarshalAround(e, before, after)
				e.Body = body
				return &Command_Enqueue{Enqueue: e}, err
			}},
	}
}

func number(md protoreflect.MessageDescriptor, name protoreflect.Name) protowire.Number {
	fd := md.Fields().ByName(name)
	if fd == nil {
		panic(fmt.Sprintf("proto: %s has no field %s", md.FullName(), name))
	}
	return fd.Number()
}

// memberDepth is the recursion limit left for a member of Command.cmd
// decoded on its own: proto.Unmarshal of the whole Envelope reaches it two
// messages down (Envelope, Command), so its fields nest as deep as there.
const memberDepth = protowire.DefaultRecursionLimit - 2

// unmarshalAround decodes a message from the two runs of its fields
// either side of its body field: merging the second into the first is
// what decoding them as one run does, the body field aside.
func unmarshalAround(m gproto.Message, before, after []byte) error {
	if err := (gproto.UnmarshalOptions{RecursionLimit: memberDepth}).Unmarshal(before, m); err != nil {
		return err
	}
	return gproto.UnmarshalOptions{Merge: true, RecursionLimit: memberDepth}.Unmarshal(after, m)
}

// UnmarshalEnvelope decodes data into env as proto.Unmarshal does, except
// that the bodies of its Publish and Enqueue commands alias data (capped
// at their length, so that an append cannot reach the bytes after them)
// instead of being copied: data must not change while env is used. An
// entry of a shape it does not follow (a field twice, one it does not
// know, anything malformed) is decoded by proto.Unmarshal, whole, so the
// outcome and the errors are proto.Unmarshal's.
func UnmarshalEnvelope(data []byte, env *Envelope) error {
	if err := unmarshalEnvelope(data, env); err != nil {
		return gproto.Unmarshal(data, env)
	}
	return nil
}

// errShape is an entry unmarshalEnvelope does not follow.
var errShape = fmt.Errorf("proto: not an entry of the usual shape")

func unmarshalEnvelope(data []byte, env *Envelope) error {
	env.Reset()
	for b := data; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errShape
		}
		b = b[n:]
		switch {
		case (num == envVersion || num == envStamp) && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return errShape
			}
			b = b[n:]
			if num == envVersion {
				env.Version = uint32(v)
			} else {
				env.StampMs = int64(v)
			}
		case num == envCommands && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errShape
			}
			b = b[n:]
			c := &Command{}
			if err := unmarshalCommand(v, c); err != nil {
				return err
			}
			env.Commands = append(env.Commands, c)
		default:
			return errShape
		}
	}
	return nil
}

// unmarshalCommand decodes one command: a Publish or an Enqueue with its
// body aliased, any other kind by proto.Unmarshal.
func unmarshalCommand(data []byte, c *Command) error {
	var (
		member   bodyField
		msg      []byte
		haveMsg  bool
		haveFlag bool
	)
	for b := data; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errShape
		}
		b = b[n:]
		f, isBody := bodyFields[num]
		switch {
		case num == cmdIgnorable && typ == protowire.VarintType && !haveFlag:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return errShape
			}
			b = b[n:]
			c.Ignorable, haveFlag = protowire.DecodeBool(v), true
		case isBody && typ == protowire.BytesType && !haveMsg:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errShape
			}
			b = b[n:]
			member, msg, haveMsg = f, v, true
		default:
			// Another kind of command, or one of an unusual shape.
			return unmarshalWhole(data, c)
		}
	}
	if !haveMsg {
		return unmarshalWhole(data, c)
	}
	// The body field, once; a message with two is decoded whole.
	start, end := -1, -1
	for b := msg; len(b) > 0; {
		at := len(msg) - len(b)
		num, typ, n := protowire.ConsumeField(b)
		if n < 0 {
			return errShape
		}
		if num == member.body {
			if start >= 0 || typ != protowire.BytesType {
				start = -2
				break
			}
			start, end = at, at+n
		}
		b = b[n:]
	}
	var before, after, body []byte
	switch start {
	case -1:
		before = msg
	case -2:
		return errShape
	default:
		_, _, tag := protowire.ConsumeTag(msg[start:])
		body, _ = protowire.ConsumeBytes(msg[start+tag : end])
		if len(body) == 0 {
			body = nil // as proto.Unmarshal leaves an empty bytes field
		} else {
			body = body[:len(body):len(body)]
		}
		before, after = msg[:start], msg[end:]
	}
	var err error
	c.Cmd, err = member.decode(before, after, body)
	return err
}

// unmarshalWhole decodes a command by proto.Unmarshal, one message down
// from the Envelope as in a decode of the whole entry.
func unmarshalWhole(data []byte, c *Command) error {
	return (gproto.UnmarshalOptions{RecursionLimit: protowire.DefaultRecursionLimit - 1}).Unmarshal(data, c)
}
