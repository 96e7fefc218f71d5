package bodies

import (
	"errors"
	"fmt"

	"github.com/raftmq/raftmq/proto"
	"google.golang.org/protobuf/encoding/protowire"
	gproto "google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The field numbers the scanner follows, read from the generated
// descriptors so that they cannot drift from proto/command.proto.
var (
	commandDesc  protoreflect.MessageDescriptor
	envCommands  protowire.Number             // Envelope.commands
	cmdPublish   protowire.Number             // Command.publish
	cmdOneof     protoreflect.OneofDescriptor // Command.cmd
	cmdOneofNums map[protowire.Number]bool
	// bodyPaths are, per member of Command.cmd that carries a body, the
	// fields leading to it from the member's message: Publish.body,
	// Enqueue.body, HandOff.message then Enqueue.body.
	bodyPaths map[protowire.Number][]protowire.Number
)

func init() {
	envCommands = fieldNumber((&proto.Envelope{}).ProtoReflect().Descriptor(), "commands")
	cmd := (&proto.Command{}).ProtoReflect().Descriptor()
	commandDesc = cmd
	cmdPublish = fieldNumber(cmd, "publish")
	enqueueBody := fieldNumber((&proto.Enqueue{}).ProtoReflect().Descriptor(), "body")
	bodyPaths = map[protowire.Number][]protowire.Number{
		cmdPublish:                   {fieldNumber((&proto.Publish{}).ProtoReflect().Descriptor(), "body")},
		fieldNumber(cmd, "enqueue"):  {enqueueBody},
		fieldNumber(cmd, "hand_off"): {fieldNumber((&proto.HandOff{}).ProtoReflect().Descriptor(), "message"), enqueueBody},
	}
	cmdOneofNums = map[protowire.Number]bool{}
	cmdOneof = cmd.Oneofs().ByName("cmd")
	members := cmdOneof.Fields()
	for i := range members.Len() {
		cmdOneofNums[members.Get(i).Number()] = true
	}
}

func fieldNumber(md protoreflect.MessageDescriptor, name protoreflect.Name) protowire.Number {
	fd := md.Fields().ByName(name)
	if fd == nil {
		panic(fmt.Sprintf("bodies: %s has no field %s", md.FullName(), name))
	}
	return fd.Number()
}

// errNotEnvelope is data that the scanner cannot follow as an Envelope.
var errNotEnvelope = errors.New("not a well-formed Envelope")

// EnvelopeBody returns the body of the command (a Publish, an Enqueue or a
// HandOff: proto.Command.Body) at position pos of
// a log entry's data (a marshalled proto.Envelope). It scans the wire
// format with protowire: the commands before pos are skipped, none is
// unmarshalled, and the returned slice aliases data. It agrees with
// proto.Unmarshal on every input that unmarshals (FuzzEnvelopeBody),
// including its rules for fields of the wrong wire type (unknown fields),
// repeated occurrences of a message field (merged) and of a oneof (the
// last member wins). On other input it returns an error, never panics.
func EnvelopeBody(data []byte, pos uint32) ([]byte, error) {
	var body []byte
	var bodyErr error
	found := false
	err := walkCommands(data, func(p uint32, cmd []byte) bool {
		if p != pos {
			return true
		}
		found = true
		body, bodyErr = commandBody(cmd)
		return false
	})
	switch {
	case err != nil:
		return nil, err
	case !found:
		return nil, fmt.Errorf("bodies: the entry has no command at position %d", pos)
	case bodyErr != nil:
		return nil, fmt.Errorf("bodies: command %d: %w", pos, bodyErr)
	}
	return body, nil
}

// walkCommands calls fn with the bytes of each command of an Envelope in
// order until fn returns false.
func walkCommands(data []byte, fn func(pos uint32, cmd []byte) bool) error {
	var pos uint32
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return fmt.Errorf("bodies: %w: %v", errNotEnvelope, protowire.ParseError(n))
		}
		data = data[n:]
		if num == envCommands && typ == protowire.BytesType {
			cmd, n := protowire.ConsumeBytes(data)
			if n < 0 {
				return fmt.Errorf("bodies: %w: command %d: %v", errNotEnvelope, pos, protowire.ParseError(n))
			}
			data = data[n:]
			if !fn(pos, cmd) {
				return nil
			}
			pos++
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, data)
		if n < 0 {
			return fmt.Errorf("bodies: %w: %v", errNotEnvelope, protowire.ParseError(n))
		}
		data = data[n:]
	}
	return nil
}

// entryBody is the body of the command at pos of a log entry's
// data, aliasing data. EnvelopeBody reads it without decoding the entry:
// it skips the commands before pos and stops there. Data it does not
// read as such a command is decoded whole (decodedBody), so that an
// entry of a shape the scanner does not follow is read as the state
// machine reads it, and the errors name what is there.
func entryBody(data []byte, pos uint32) ([]byte, error) {
	if b, err := EnvelopeBody(data, pos); err == nil {
		return b, nil
	}
	return decodedBody(data, pos)
}

// decodedBody is the body of the command at pos of an entry's
// data by proto.Unmarshal of the whole Envelope: every command and body
// decoded to take one.
func decodedBody(data []byte, pos uint32) ([]byte, error) {
	env := &proto.Envelope{}
	if err := gproto.Unmarshal(data, env); err != nil {
		return nil, fmt.Errorf("bodies: %w: %v", errNotEnvelope, err)
	}
	cmds := env.GetCommands()
	if int64(pos) >= int64(len(cmds)) {
		return nil, fmt.Errorf("%w: the entry has %d commands", errNoCommand, len(cmds))
	}
	b, ok := cmds[pos].Body()
	if !ok {
		var kind protowire.Number
		if fd := cmds[pos].ProtoReflect().WhichOneof(cmdOneof); fd != nil {
			kind = fd.Number()
		}
		return nil, fmt.Errorf("command %d: %w", pos, notPublish(kind))
	}
	if b == nil {
		return []byte{}, nil
	}
	return b, nil
}

// errNotPublish is a command of a kind that carries no body (not a
// Publish, an Enqueue or a HandOff).
var errNotPublish = errors.New("not a Publish command")

// notPublish names the kind of a command that is not a Publish.
func notPublish(kind protowire.Number) error {
	if kind == 0 {
		return fmt.Errorf("%w but a command of no kind", errNotPublish)
	}
	return fmt.Errorf("%w but a %s", errNotPublish, commandDesc.Fields().ByNumber(kind).Name())
}

// commandBody is the body of one marshalled Command: a Publish's, an
// Enqueue's or a HandOff's.
func commandBody(cmd []byte) ([]byte, error) {
	var body []byte
	var kind protowire.Number
	for len(cmd) > 0 {
		num, typ, n := protowire.ConsumeTag(cmd)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		cmd = cmd[n:]
		if !cmdOneofNums[num] || typ != protowire.BytesType {
			// Not a member, or of the wrong wire type: proto.Unmarshal
			// keeps such a field as unknown, and so do we.
			n = protowire.ConsumeFieldValue(num, typ, cmd)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			cmd = cmd[n:]
			continue
		}
		msg, n := protowire.ConsumeBytes(cmd)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		cmd = cmd[n:]
		if kind != num {
			// Another member came in between: this one starts afresh.
			kind, body = num, nil
		}
		path, carries := bodyPaths[num]
		if !carries {
			continue
		}
		// A message field seen again is merged: a later body replaces
		// an earlier one, a later occurrence without one keeps it.
		b, ok, err := bodyOf(msg, path)
		if err != nil {
			return nil, err
		}
		if ok {
			body = b
		}
	}
	if _, carries := bodyPaths[kind]; !carries {
		return nil, notPublish(kind)
	}
	if body == nil {
		body = []byte{}
	}
	return body, nil
}

// bodyOf is the last field at path in one marshalled message: path[0] is
// the bytes field itself, or a message field whose occurrences are each
// followed by the rest of the path (merged, as proto.Unmarshal merges
// them: the last body found wins).
func bodyOf(msg []byte, path []protowire.Number) (body []byte, ok bool, _ error) {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return nil, false, protowire.ParseError(n)
		}
		msg = msg[n:]
		if num == path[0] && typ == protowire.BytesType {
			b, n := protowire.ConsumeBytes(msg)
			if n < 0 {
				return nil, false, protowire.ParseError(n)
			}
			msg = msg[n:]
			if len(path) == 1 {
				body, ok = b, true
				continue
			}
			inner, found, err := bodyOf(b, path[1:])
			if err != nil {
				return nil, false, err
			}
			if found {
				body, ok = inner, true
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, msg)
		if n < 0 {
			return nil, false, protowire.ParseError(n)
		}
		msg = msg[n:]
	}
	return body, ok, nil
}

// entryBodies is the body of every command of an entry (the error of a
// command that is not a Publish is kept instead): one scan for the
// relocation of many bodies of the entry.
type entryBodies struct {
	bodies [][]byte
	errs   map[uint32]error
}

func scanEntry(data []byte) (*entryBodies, error) {
	e := &entryBodies{}
	err := walkCommands(data, func(pos uint32, cmd []byte) bool {
		b, err := commandBody(cmd)
		if err != nil {
			if e.errs == nil {
				e.errs = map[uint32]error{}
			}
			e.errs[pos] = err
		}
		e.bodies = append(e.bodies, b)
		return true
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// errNoCommand is a position past an entry's last command.
var errNoCommand = errors.New("no command at that position")

// body is the body at pos.
func (e *entryBodies) body(pos uint32) ([]byte, error) {
	if int64(pos) >= int64(len(e.bodies)) {
		return nil, fmt.Errorf("%w: the entry has %d commands", errNoCommand, len(e.bodies))
	}
	if err := e.errs[pos]; err != nil {
		return nil, fmt.Errorf("command %d: %w", pos, err)
	}
	return e.bodies[pos], nil
}
