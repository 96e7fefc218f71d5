package fsm_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	pb "google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

// validCommands holds one well-formed command of every kind, as the
// broker builds them.
func validCommands() []*proto.Command {
	cons := &proto.ConsumerRef{Channel: ch1, Tag: "t1"}
	c := func(x any) *proto.Command {
		cmd := &proto.Command{}
		switch v := x.(type) {
		case *proto.VhostPut:
			cmd.Cmd = &proto.Command_VhostPut{VhostPut: v}
		case *proto.VhostDelete:
			cmd.Cmd = &proto.Command_VhostDelete{VhostDelete: v}
		case *proto.UserPut:
			cmd.Cmd = &proto.Command_UserPut{UserPut: v}
		case *proto.UserDelete:
			cmd.Cmd = &proto.Command_UserDelete{UserDelete: v}
		case *proto.PermissionSet:
			cmd.Cmd = &proto.Command_PermissionSet{PermissionSet: v}
		case *proto.PermissionClear:
			cmd.Cmd = &proto.Command_PermissionClear{PermissionClear: v}
		case *proto.ExchangeDelete:
			cmd.Cmd = &proto.Command_ExchangeDelete{ExchangeDelete: v}
		case *proto.QueueDelete:
			cmd.Cmd = &proto.Command_QueueDelete{QueueDelete: v}
		case *proto.QueuePurge:
			cmd.Cmd = &proto.Command_QueuePurge{QueuePurge: v}
		case *proto.Unbind:
			cmd.Cmd = &proto.Command_Unbind{Unbind: v}
		case *proto.ChannelClosed:
			cmd.Cmd = &proto.Command_ChannelClosed{ChannelClosed: v}
		case *proto.ConnectionClosed:
			cmd.Cmd = &proto.Command_ConnectionClosed{ConnectionClosed: v}
		case *proto.NodeDown:
			cmd.Cmd = &proto.Command_NodeDown{NodeDown: v}
		case *proto.ExpireQueue:
			cmd.Cmd = &proto.Command_ExpireQueue{ExpireQueue: v}
		case *proto.RestartLeases:
			cmd.Cmd = &proto.Command_RestartLeases{RestartLeases: v}
		case *proto.PolicyClear:
			cmd.Cmd = &proto.Command_PolicyClear{PolicyClear: v}
		case *proto.Tick:
			cmd.Cmd = &proto.Command_Tick{Tick: v}
		}
		return cmd
	}
	headers := table("x-death", &proto.Value{Kind: &proto.Value_Array{Array: &proto.Array{Values: []*proto.Value{
		{Kind: &proto.Value_Table{Table: table("count", i64(1), "reason", str("expired"))}},
	}}}}, "b", &proto.Value{Kind: &proto.Value_Int8{Int8: -128}}, "d",
		&proto.Value{Kind: &proto.Value_Decimal{Decimal: &proto.Decimal{Scale: 2, Value: 314}}})
	return []*proto.Command{
		c(&proto.VhostPut{Name: "/", Description: "default"}),
		c(&proto.VhostDelete{Name: "v"}),
		c(&proto.UserPut{Name: "guest", PasswordHash: []byte("hash"), HashAlgorithm: "sha256", Tags: []string{"administrator"}}),
		c(&proto.UserDelete{Name: "guest"}),
		c(&proto.PermissionSet{User: "guest", Vhost: "/", Configure: ".*", Write: ".*", Read: ".*"}),
		c(&proto.PermissionClear{User: "guest", Vhost: "/"}),
		exchangeDeclare("x", "topic", table("alternate-exchange", str("ae"))),
		c(&proto.ExchangeDelete{Vhost: "/", Name: "x"}),
		declare("", table("x-message-ttl", i64(100))), // server-named
		c(&proto.QueueDelete{Vhost: "/", Name: "q", Connection: conn1}),
		c(&proto.QueuePurge{Vhost: "/", Name: "q"}),
		bind("amq.topic", "q", "a.#", false, nil),
		c(&proto.Unbind{Vhost: "/", Source: "amq.topic", Destination: "q", RoutingKey: "a.#", Connection: conn1}),
		publish("", "q", "body", &proto.Properties{MessageId: ptr("m1"), Priority: ptr(uint32(9)), Headers: headers}),
		get("q", false),
		consume("q", "", ch1, 10),
		cancel("t1", ch1),
		settle(ch1, 3, true),
		{Cmd: &proto.Command_Requeue{Requeue: &proto.Requeue{Channel: ch1, Tags: []uint64{1, 2}, Unseen: true}}},
		discard(ch1, 1, false),
		c(&proto.ChannelClosed{Channel: ch1}),
		c(&proto.ConnectionClosed{Connection: conn1}),
		c(&proto.NodeDown{Node: "n1"}),
		expire("q", "r"),
		c(&proto.ExpireQueue{Queue: &proto.QueueRef{Vhost: "/", Name: "q"}}),
		c(&proto.Tick{}),
		c(&proto.RestartLeases{}),
		policySet("p", "^q", 1, false, nil),
		c(&proto.PolicyClear{Vhost: "/", Name: "p"}),
		limitsCmd("/", false, []string{"max-queues"}, "max-connections", 10),
		{Cmd: &proto.Command_Cancel{Cancel: &proto.Cancel{Consumer: cons}}},
		fsmtest.SetProtocol(fsm.Protocol),
		fsmtest.ConsumerTimeout(ch1, fsm.DefaultConsumerTimeout),
		fsmtest.ReleaseDelayed(fsm.DelayedReleaseBatch),
		fsmtest.CancelDelayed("/", "dx", 7),
		fsmtest.PurgeDelayed("/", "dx"),
		{Cmd: &proto.Command_Credit{Credit: &proto.Credit{Consumer: cons, Credit: 1100}}},
		fsmtest.QueueLeaseEnded("/", "q", "g1", 12),
		// Before the level 13 kinds, which groups_test.go reads as the last four.
		queueGroupsCmd(groupSpec("g1", "n1", "n2", "n3")),
		groupMembersCmd("g1", 0, "n2", "n4", "n3"),
		fsmtest.PlaceQueues(),
		fsmtest.GroupInit(2),
		fsmtest.Enqueue("/", "x", "k", "body", &proto.Properties{MessageId: ptr("m1")}, "q", "r"),
		handOff(1, 7, "body", true, "q"),
		fsmtest.HandOffDone(7),
	}
}

// laterKinds are the kinds introduced after the first protocol, with the
// protocol of each.
var laterKinds = map[string]uint32{"set_protocol": 2, "consumer_timeout": 4, "release_delayed": 6, "cancel_delayed": 6, "purge_delayed": 6, "vhost_limits": 12,
	"group_init": 13, "enqueue": 13, "hand_off": 13, "hand_off_done": 13, "credit": 14, "queue_groups": 15,
	"group_members": 16, "place_queues": 17, "queue_lease_ended": 23}

// oneofKinds lists the Command oneof's fields.
func oneofKinds() []protoreflect.FieldDescriptor {
	fields := (&proto.Command{}).ProtoReflect().Descriptor().Oneofs().ByName("cmd").Fields()
	out := make([]protoreflect.FieldDescriptor, fields.Len())
	for i := range out {
		out[i] = fields.Get(i)
	}
	return out
}

func kindOf(c *proto.Command) string {
	if f := c.ProtoReflect().WhichOneof(c.ProtoReflect().Descriptor().Oneofs().ByName("cmd")); f != nil {
		return string(f.Name())
	}
	return ""
}

func invalid(t *testing.T, err error) *fsm.InvalidError {
	t.Helper()
	var e *fsm.InvalidError
	if !errors.As(err, &e) {
		t.Fatalf("error %v is not an *fsm.InvalidError", err)
	}
	return e
}

func TestValidate_AcceptsEveryKindAsTheBrokerBuildsIt(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range validCommands() {
		seen[kindOf(c)] = true
		if err := fsm.Validate(c, fsm.Limits{}); err != nil {
			t.Errorf("%s: %v", kindOf(c), err)
		}
		want := max(1, laterKinds[kindOf(c)])
		if p := fsm.CommandProtocol(c); p != want {
			t.Errorf("%s: protocol %d, want %d", kindOf(c), p, want)
		}
	}
	for _, f := range oneofKinds() {
		if !seen[string(f.Name())] {
			t.Errorf("no valid example of %s", f.Name())
		}
	}
}

// TestValidate_RefusesEveryKindEmptyOrWithoutItsMessage: a command whose
// message is absent is malformed whatever its kind, and an empty message
// is refused for every kind that needs a name or an id.
func TestValidate_RefusesEveryKindEmptyOrWithoutItsMessage(t *testing.T) {
	mayBeEmpty := map[string]bool{"tick": true, "restart_leases": true, "expire": true, "place_queues": true}
	for _, f := range oneofKinds() {
		t.Run(string(f.Name()), func(t *testing.T) {
			empty := &proto.Command{}
			m := empty.ProtoReflect()
			m.Set(f, protoreflect.ValueOfMessage(m.NewField(f).Message()))
			err := fsm.Validate(empty, fsm.Limits{})
			if mayBeEmpty[string(f.Name())] {
				if err != nil {
					t.Fatalf("empty %s: %v", f.Name(), err)
				}
			} else if e := invalid(t, err); e.Code != 541 {
				t.Fatalf("empty %s: %v (code %d), want 541", f.Name(), e, e.Code)
			}

			// The oneof set to a nil message: only code builds that.
			nilMsg := &proto.Command{}
			nilMsg.ProtoReflect().Set(f, protoreflect.ValueOfMessage(m.Get(f).Message().Type().Zero()))
			if kindOf(nilMsg) != string(f.Name()) {
				t.Skipf("cannot build %s with a nil message", f.Name())
			}
			if e := invalid(t, fsm.Validate(nilMsg, fsm.Limits{})); e.Code != 541 || !strings.Contains(e.Text, "without its message") {
				t.Fatalf("nil %s: %v", f.Name(), e)
			}
		})
	}
}

// TestValidate_RefusesMissingIDs takes each valid command, clears one
// required field, and expects a refusal naming it.
func TestValidate_RefusesMissingIDs(t *testing.T) {
	cases := []struct {
		name string
		cmd  *proto.Command
		want string
	}{
		{"no kind", &proto.Command{}, "no kind"},
		{"ignorable, no kind", &proto.Command{Ignorable: true}, "no kind"},
		{"vhost put without name", &proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{}}}, "vhost name is empty"},
		{"declare without vhost", &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Name: "q"}}}, "vhost name is empty"},
		{"declare with half a connection", &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Connection: &proto.ConnectionRef{Node: "n1"}}}}, "connection id is empty"},
		{"publish without vhost", &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Exchange: "x"}}}, "vhost name is empty"},
		{"get without channel", &proto.Command{Cmd: &proto.Command_Get{Get: &proto.Get{Vhost: "/", Queue: "q"}}}, "channel is missing"},
		{"consume without consumer", &proto.Command{Cmd: &proto.Command_Consume{Consume: &proto.Consume{Vhost: "/", Queue: "q"}}}, "consumer is missing"},
		{"consume on a channel without node", consume("q", "t", &proto.ChannelRef{Connection: "c"}, 0), "consumer channel node is empty"},
		{"cancel without channel", &proto.Command{Cmd: &proto.Command_Cancel{Cancel: &proto.Cancel{Consumer: &proto.ConsumerRef{Tag: "t"}}}}, "consumer channel is missing"},
		{"settle without channel", settle(nil, 1, false), "channel is missing"},
		{"channel number out of range", settle(&proto.ChannelRef{Node: "n", Connection: "c", Channel: 70000}, 1, false), "out of range"},
		{"node down without node", &proto.Command{Cmd: &proto.Command_NodeDown{NodeDown: &proto.NodeDown{}}}, "node is empty"},
		{"expire of a nameless queue", &proto.Command{Cmd: &proto.Command_Expire{Expire: &proto.Expire{Queues: []*proto.QueueRef{{Vhost: "/"}}}}}, "queue name is empty"},
		{"expire queue without queue", &proto.Command{Cmd: &proto.Command_ExpireQueue{ExpireQueue: &proto.ExpireQueue{}}}, "queue is missing"},
		{"policy without name", policySet("", "^q", 0, false, nil), "policy name is empty"},
		{"header without value", publish("", "q", "", &proto.Properties{Headers: &proto.Table{Fields: []*proto.Field{{Key: "k"}}}}), "has no value"},
		{"header of no kind", publish("", "q", "", &proto.Properties{Headers: table("k", &proto.Value{})}), "has no value"},
		{"int8 out of range", publish("", "q", "", &proto.Properties{Headers: table("k", &proto.Value{Kind: &proto.Value_Int8{Int8: 128}})}), "does not fit"},
		{"uint16 out of range", exchangeDeclare("x", "direct", table("k", &proto.Value{Kind: &proto.Value_Uint16{Uint16: 65536}})), "does not fit"},
		{"decimal scale out of range", bind("x", "q", "", false, table("k", &proto.Value{Kind: &proto.Value_Decimal{Decimal: &proto.Decimal{Scale: 256}}})), "does not fit"},
		{"nil nested table", declare("q", table("k", &proto.Value{Kind: &proto.Value_Table{}})), "has no value"},
		{"priority out of range", publish("", "q", "", &proto.Properties{Priority: ptr(uint32(256))}), "priority 256"},
		{"delivery mode out of range", publish("", "q", "", &proto.Properties{DeliveryMode: ptr(uint32(300))}), "delivery-mode 300"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := invalid(t, fsm.Validate(tc.cmd, fsm.Limits{}))
			if e.Code != 541 || !strings.Contains(e.Text, tc.want) {
				t.Fatalf("got %d %q, want 541 and %q", e.Code, e.Text, tc.want)
			}
		})
	}
}

func TestValidate_Limits(t *testing.T) {
	long := strings.Repeat("a", fsm.MaxNameLen+1)
	max := strings.Repeat("a", fsm.MaxNameLen)
	deep := &proto.Value{Kind: &proto.Value_Int64{Int64: 1}}
	for range fsm.MaxTableDepth + 1 {
		deep = &proto.Value{Kind: &proto.Value_Array{Array: &proto.Array{Values: []*proto.Value{deep}}}}
	}
	cases := []struct {
		name string
		cmd  *proto.Command
		lim  fsm.Limits
		want string // "" for accepted
	}{
		{"queue name of 255 bytes", declare(max, nil), fsm.Limits{}, ""},
		{"queue name of 256 bytes", declare(long, nil), fsm.Limits{}, "queue name is 256 bytes long"},
		{"routing key of 256 bytes", publish("", long, "", nil), fsm.Limits{}, "routing key is 256 bytes long"},
		{"consumer tag of 256 bytes", consume("q", long, ch1, 0), fsm.Limits{}, "consumer tag is 256 bytes long"},
		{"message-id of 256 bytes", publish("", "q", "", &proto.Properties{MessageId: &long}), fsm.Limits{}, "message-id is 256 bytes long"},
		{"header key of 256 bytes", publish("", "q", "", &proto.Properties{Headers: table(long, i64(1))}), fsm.Limits{}, "key is 256 bytes long"},
		{"node-down run of 255 bytes", &proto.Command{Cmd: &proto.Command_NodeDown{NodeDown: &proto.NodeDown{Node: "n", Run: max}}}, fsm.Limits{}, ""},
		{"node-down run of 256 bytes", &proto.Command{Cmd: &proto.Command_NodeDown{NodeDown: &proto.NodeDown{Node: "n", Run: long}}}, fsm.Limits{}, "run is 256 bytes long"},
		{"user tag of 256 bytes", &proto.Command{Cmd: &proto.Command_UserPut{UserPut: &proto.UserPut{Name: "u", Tags: []string{long}}}}, fsm.Limits{}, "user tag is 256 bytes long"},
		{"body at the limit", publish("", "q", "12345", nil), fsm.Limits{MaxBody: 5}, ""},
		{"body over the limit", publish("", "q", "123456", nil), fsm.Limits{MaxBody: 5}, "message size 6 is larger than configured max size 5"},
		{"tables nested too deep", publish("", "q", "", &proto.Properties{Headers: table("k", deep)}), fsm.Limits{}, "nests deeper"},
		{"pattern too long", policySet("p", strings.Repeat("a", fsm.MaxPatternLen+1), 0, false, nil), fsm.Limits{}, "policy pattern is"},
		// The leader names queues of the state: an earlier version may
		// have let in a longer name, and it must still expire.
		{"expire of a long name", &proto.Command{Cmd: &proto.Command_Expire{Expire: &proto.Expire{Queues: []*proto.QueueRef{{Vhost: long, Name: long}}}}}, fsm.Limits{}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := fsm.Validate(tc.cmd, tc.lim)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			e := invalid(t, err)
			if e.Code != 406 || !strings.Contains(e.Text, tc.want) || !strings.HasPrefix(e.Text, "PRECONDITION_FAILED - ") {
				t.Fatalf("got %d %q, want 406 and %q", e.Code, e.Text, tc.want)
			}
		})
	}
}

// withUnknownField appends field 99 (no field of any raftmq message) to
// the encoding of m and decodes it again into a fresh message of its type.
func withUnknownField[M pb.Message](t *testing.T, m M) M {
	t.Helper()
	b, err := pb.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	b = protowire.AppendTag(b, 99, protowire.VarintType)
	b = protowire.AppendVarint(b, 7)
	out := m.ProtoReflect().New().Interface().(M)
	if err := pb.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestValidate_RefusesUnknownFields(t *testing.T) {
	newKind := withUnknownField(t, &proto.Command{})
	if e := invalid(t, fsm.Validate(newKind, fsm.Limits{})); e.Code != 541 || !strings.Contains(e.Text, "unknown kind") {
		t.Fatalf("unknown kind: %v", e)
	}
	if p := fsm.CommandProtocol(newKind); p != 0 {
		t.Fatalf("unknown kind has protocol %d", p)
	}
	props := withUnknownField(t, &proto.Properties{MessageId: ptr("m")})
	c := publish("", "q", "", props)
	if e := invalid(t, fsm.Validate(c, fsm.Limits{})); e.Code != 541 || !strings.Contains(e.Text, "fields this node does not know") {
		t.Fatalf("unknown field in properties: %v", e)
	}
	// Deeper: in a table nested in a header (a list element, a oneof
	// member), and in the channel of a publish (a oneof's message).
	deep := withUnknownField(t, &proto.Decimal{Scale: 1, Value: 2})
	nested := &proto.Table{Fields: []*proto.Field{{Key: "a", Value: &proto.Value{Kind: &proto.Value_Int32{Int32: 1}}}, {Key: "d", Value: &proto.Value{Kind: &proto.Value_Decimal{Decimal: deep}}}}}
	headers := &proto.Table{Fields: []*proto.Field{{Key: "t", Value: &proto.Value{Kind: &proto.Value_Table{Table: nested}}}}}
	c = publish("", "q", "", &proto.Properties{Headers: headers})
	if e := invalid(t, fsm.Validate(c, fsm.Limits{})); e.Code != 541 || !strings.Contains(e.Text, "fields this node does not know") {
		t.Fatalf("unknown field in a nested header: %v", e)
	}
	deep.ProtoReflect().SetUnknown(nil)
	if err := fsm.Validate(c, fsm.Limits{}); err != nil {
		t.Fatalf("the same publish without the unknown field: %v", err)
	}
	// A bad value still names its header.
	bad := &proto.Table{Fields: []*proto.Field{{Key: "ok", Value: &proto.Value{Kind: &proto.Value_Int32{Int32: 1}}},
		{Key: "t", Value: &proto.Value{Kind: &proto.Value_Table{Table: &proto.Table{Fields: []*proto.Field{{Key: "small", Value: &proto.Value{Kind: &proto.Value_Int8{Int8: 300}}}}}}}}}}
	if e := invalid(t, fsm.Validate(publish("", "q", "", &proto.Properties{Headers: bad}), fsm.Limits{})); !strings.Contains(e.Text, "field 't' field 'small' value 300") {
		t.Fatalf("bad nested value: %v", e)
	}
	c.GetPublish().Channel = withUnknownField(t, &proto.ChannelRef{Node: "n", Connection: "c", Channel: 1})
	if e := invalid(t, fsm.Validate(c, fsm.Limits{})); e.Code != 541 || !strings.Contains(e.Text, "fields this node does not know") {
		t.Fatalf("unknown field in the publish's channel: %v", e)
	}
}

// BenchmarkValidate_Publish is the leader's check of one publish with a
// few headers, before it is proposed.
func BenchmarkValidate_Publish(b *testing.B) {
	headers := &proto.Table{Fields: []*proto.Field{
		{Key: "a", Value: &proto.Value{Kind: &proto.Value_Int32{Int32: 1}}},
		{Key: "b", Value: &proto.Value{Kind: &proto.Value_ShortString{ShortString: "x"}}},
	}}
	c := &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", RoutingKey: "q", Body: make([]byte, 1024),
		Properties: &proto.Properties{DeliveryMode: ptr[uint32](2), Headers: headers}, Channel: &proto.ChannelRef{Node: "n1", Connection: "c1", Channel: 1}}}}
	b.ReportAllocs()
	for b.Loop() {
		if err := fsm.Validate(c, fsm.Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestApply_EveryKindWithoutItsMessage: apply refuses what Validate calls
// malformed instead of dereferencing it, and changes nothing.
func TestApply_EveryKindWithoutItsMessage(t *testing.T) {
	for _, f := range oneofKinds() {
		t.Run(string(f.Name()), func(t *testing.T) {
			c := &proto.Command{}
			m := c.ProtoReflect()
			m.Set(f, protoreflect.ValueOfMessage(m.NewField(f).Message().Type().Zero()))
			if kindOf(c) == "" {
				t.Skip("cannot build the command")
			}
			got, twin := populated(t), populated(t)
			res, _ := fsmtest.Apply(t, got, 50, c)
			fsmtest.Apply(t, twin, 50, &proto.Command{Ignorable: true})
			if res[0].GetCode() != 541 {
				t.Fatalf("result %v, want 541", res[0])
			}
			if got.Digest() != twin.Digest() {
				t.Fatal("a refused command changed the state")
			}
		})
	}
}

// populated is a machine with a queue holding messages, a consumer with
// unacked deliveries, bindings and a policy.
func populated(t testing.TB) *fsm.Machine {
	t.Helper()
	m := fsmtest.New(t)
	fsmtest.Apply(t, m, 10,
		declare("q", table("x-dead-letter-exchange", str("amq.fanout"))),
		declare("dl", nil),
		bind("amq.fanout", "dl", "", false, nil),
		bind("amq.topic", "q", "a.#", false, nil),
		policySet("p", "^q", 0, false, &proto.PolicyDefinition{MessageTtl: ptr(int64(1000))}),
		publish("", "q", "one", nil), publish("", "q", "two", nil), publish("amq.topic", "a.b", "three", nil),
		consume("q", "c1", ch1, 1),
	)
	return m
}

// TestApply_TopicPatternOfManyHashes: a binding key of many "#" against a
// long routing key that it does not match must not take exponential time
// (every replica would hang on the publish).
func TestApply_TopicPatternOfManyHashes(t *testing.T) {
	m := fsmtest.New(t)
	key := strings.Repeat("#.", 100) + "z"
	rk := strings.TrimSuffix(strings.Repeat("a.", 120), ".")
	fsmtest.Apply(t, m, 10, declare("q", nil), bind("amq.topic", "q", key, false, nil))
	r, _ := fsmtest.One(t, m, 11, publish("amq.topic", rk, "x", nil))
	if r.GetRouted() {
		t.Fatal("routed a key that does not match")
	}
	r, _ = fsmtest.One(t, m, 12, publish("amq.topic", rk+".z", "x", nil))
	if !r.GetRouted() {
		t.Fatal("did not route a key that matches")
	}
}

func TestCheckEntry(t *testing.T) {
	newKind := withUnknownField(t, &proto.Command{})
	skippable := withUnknownField(t, &proto.Command{Ignorable: true})
	env := func(cs ...*proto.Command) fsm.Entry {
		return fsm.Entry{Index: 42, Envelope: &proto.Envelope{Version: 1, Commands: cs}}
	}
	if err := fsm.CheckEntry(env(validCommands()...)); err != nil {
		t.Fatalf("valid commands: %v", err)
	}
	if err := fsm.CheckEntry(env(&proto.Command{}, skippable)); err != nil {
		t.Fatalf("an empty and an ignorable command: %v", err)
	}
	err := fsm.CheckEntry(env(vhostPutCmd("/"), newKind))
	var u *fsm.UnknownCommandError
	if !errors.As(err, &u) || u.Index != 42 || u.Position != 1 || !strings.Contains(err.Error(), "newer version") {
		t.Fatalf("unknown kind: %v", err)
	}
}

func vhostPutCmd(name string) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: name}}}
}

// TestValidate_RefusalTextsNameTheField: the labels of refusals, which the
// validator composes only when it refuses, name the field in full.
func TestValidate_RefusalTextsNameTheField(t *testing.T) {
	long := strings.Repeat("a", fsm.MaxNameLen+1)
	pub := func(ch *proto.ChannelRef, props *proto.Properties) *proto.Command {
		c := publish("", "q", "", props)
		c.GetPublish().Channel = ch
		return c
	}
	cases := []struct {
		name string
		cmd  *proto.Command
		want string
	}{
		{"publishing channel without node", pub(&proto.ChannelRef{Connection: "c"}, nil),
			"INTERNAL_ERROR - invalid command: publishing channel node is empty"},
		{"publishing channel with a long connection", pub(&proto.ChannelRef{Node: "n", Connection: long}, nil),
			"PRECONDITION_FAILED - publishing channel connection is 256 bytes long, longer than 255"},
		{"publishing channel out of range", pub(&proto.ChannelRef{Node: "n", Connection: "c", Channel: 70000}, nil),
			"INTERNAL_ERROR - invalid command: publishing channel number 70000 is out of range"},
		{"long content-type", pub(nil, &proto.Properties{ContentType: &long}),
			"PRECONDITION_FAILED - property content-type is 256 bytes long, longer than 255"},
		{"consumer channel without connection", consume("q", "t", &proto.ChannelRef{Node: "n"}, 0),
			"INTERNAL_ERROR - invalid command: consumer channel connection is empty"},
		{"consumer channel out of range", consume("q", "t", &proto.ChannelRef{Node: "n", Connection: "c", Channel: 70000}, 0),
			"INTERNAL_ERROR - invalid command: consumer channel number 70000 is out of range"},
		{"cancel without channel", &proto.Command{Cmd: &proto.Command_Cancel{Cancel: &proto.Cancel{Consumer: &proto.ConsumerRef{Tag: "t"}}}},
			"INTERNAL_ERROR - invalid command: consumer channel is missing"},
		{"declare with a connection without node", &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "q", Connection: &proto.ConnectionRef{Connection: "c"}}}},
			"INTERNAL_ERROR - invalid command: connection node is empty"},
		{"settle on a channel without node", settle(&proto.ChannelRef{Connection: "c"}, 1, false),
			"INTERNAL_ERROR - invalid command: channel node is empty"},
		{"bad header after a good one", pub(nil, &proto.Properties{Headers: &proto.Table{Fields: []*proto.Field{
			{Key: "ok", Value: i64(1)}, {Key: "k", Value: &proto.Value{Kind: &proto.Value_Int8{Int8: 128}}}}}}),
			"INTERNAL_ERROR - invalid command: headers field 'k' value 128 does not fit its type"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if e := invalid(t, fsm.Validate(tc.cmd, fsm.Limits{})); e.Text != tc.want {
				t.Fatalf("got %q, want %q", e.Text, tc.want)
			}
		})
	}
}
