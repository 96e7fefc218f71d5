package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/broker"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/proto"
)

// A follower's broker answers from what its node applied: the default
// user and vhost the first leader created, a queue declared through it
// (forwarded to the leader), and the time each submit took.
func TestBroker_ServesFromTheNodesAppliedState(t *testing.T) {
	c := clustertest.New(t, 2)
	c.WaitForLeader(clustertest.Timeout)
	node := c.Followers()[0]
	<-node.Ready()
	var observed []time.Duration
	b := broker.New(node, func(d time.Duration) { observed = append(observed, d) })
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if !b.UserExists("guest") || !b.VhostExists("/") {
			return errors.New("no default user and vhost yet on " + node.NodeID())
		}
		return nil
	})
	if b.NodeID() != node.NodeID() {
		t.Fatalf("NodeID %q, want %q", b.NodeID(), node.NodeID())
	}
	if tags, ok := b.Authenticate("guest", "guest"); !ok || len(tags) != 1 || tags[0] != "administrator" {
		t.Fatalf("guest/guest: tags %v ok %v, want [administrator] true", tags, ok)
	}
	if _, ok := b.Authenticate("guest", "wrong"); ok {
		t.Fatal("a wrong password authenticated")
	}
	if _, _, _, ok := b.Permission("guest", "/"); !ok {
		t.Fatal("guest has no permission on /")
	}
	if n, exists := b.QueueCount("/", "q"); n != 0 || exists {
		t.Fatalf("before the declaration: %d queues, q exists %v", n, exists)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clustertest.Timeout)
	defer cancel()
	res, err := b.Submit(ctx, &proto.Command{Cmd: &proto.Command_QueueDeclare{
		QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "q", Durable: true}}})
	if err != nil || res.GetCode() != 0 {
		t.Fatalf("declare: %v %v", res, err)
	}
	// Read your writes: the submit returned once this node applied it.
	if n, exists := b.QueueCount("/", "q"); n != 1 || !exists {
		t.Fatalf("after the declaration: %d queues, q exists %v", n, exists)
	}
	if len(observed) != 1 {
		t.Fatalf("observed %d submits, want 1", len(observed))
	}
}

// SubmitGroup proposes group 0's commands to the node's own log, as
// SubmitBatch; a queue group's log is not served here yet, which it says
// rather than propose to the wrong log.
func TestBroker_SubmitGroup(t *testing.T) {
	b, ctx := oneNode(t)
	res, err := b.SubmitGroup(ctx, 0, []*proto.Command{{Cmd: &proto.Command_QueueDeclare{
		QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "q", Durable: true}}}})
	if err != nil || len(res) != 1 || res[0].GetCode() != 0 {
		t.Fatalf("group 0: %v %v", res, err)
	}
	if _, exists := b.QueueCount("/", "q"); !exists {
		t.Fatal("group 0's command did not reach the node's log")
	}
	if _, err := b.SubmitGroup(ctx, 1, []*proto.Command{{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}}); err == nil {
		t.Fatal("group 1 without its log: no error")
	}
	if got := b.Unacked(1, &proto.ChannelRef{}, []uint64{1}); len(got) != 0 {
		t.Fatalf("group 1 without its log holds %v", got)
	}
}

// A declare that RabbitMQ refuses for what it says on its own (here a
// quorum queue that is not durable) is refused before it reaches a log,
// and no queue comes of it.
func TestBroker_DeclareRefusedBeforeTheLog(t *testing.T) {
	b, ctx := oneNode(t)
	quorum := &proto.Table{Fields: []*proto.Field{{Key: "x-queue-type", Value: &proto.Value{Kind: &proto.Value_LongString{LongString: []byte("quorum")}}}}}
	res, err := b.Submit(ctx, &proto.Command{Cmd: &proto.Command_QueueDeclare{
		QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "q", Arguments: quorum}}})
	if want := "PRECONDITION_FAILED - invalid property 'non-durable' for queue 'q' in vhost '/'"; err != nil || res.GetCode() != 406 || res.GetText() != want {
		t.Fatalf("non-durable quorum queue: %v %v, want 406 %q", res, err, want)
	}
	if _, exists := b.QueueCount("/", "q"); exists {
		t.Fatal("the refused declare made a queue")
	}
	res, err = b.Submit(ctx, &proto.Command{Cmd: &proto.Command_QueueDeclare{
		QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "q", Durable: true, Arguments: quorum}}})
	if err != nil || res.GetCode() != 0 {
		t.Fatalf("durable quorum queue: %v %v", res, err)
	}
	if _, exists := b.QueueCount("/", "q"); !exists {
		t.Fatal("the durable quorum queue was not made")
	}
	// A bind to a headers exchange with an x-match it does not know.
	res, err = b.Submit(ctx, headersBind("q", "most"))
	if err != nil || res.GetCode() != 406 {
		t.Fatalf("bind with x-match most: %v %v, want 406", res, err)
	}
}

// A bind that a node lets through because its own state does not hold
// the headers exchange yet (declared a moment earlier through another
// node) is refused by the leader, which holds it: here the bind goes to
// the log the way such a node sends it, past the broker's own check.
func TestBroker_BindRefusedByTheLeader(t *testing.T) {
	c := clustertest.New(t, 3)
	c.WaitForLeader(clustertest.Timeout)
	follower := c.Followers()[0]
	<-follower.Ready()
	b := broker.New(follower, nil)
	ctx, cancel := context.WithTimeout(context.Background(), clustertest.Timeout)
	defer cancel()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if !b.VhostExists("/") {
			return errors.New("no default vhost yet")
		}
		return nil
	})
	if res, err := b.Submit(ctx, &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "q", Durable: true}}}); err != nil || res.GetCode() != 0 {
		t.Fatalf("declare q: %v %v", res, err)
	}
	res, err := follower.Submit(ctx, headersBind("q", "most"))
	if err != nil || res.GetCode() != 406 || !strings.Contains(res.GetText(), "Invalid x-match field value") || res.GetIndex() != 0 {
		t.Fatalf("bind with x-match most through the log: %v %v, want 406 before any entry", res, err)
	}
	if res, err := follower.Submit(ctx, headersBind("q", "any")); err != nil || res.GetCode() != 0 || res.GetIndex() == 0 {
		t.Fatalf("bind with x-match any: %v %v", res, err)
	}
}

// headersBind binds queue q to amq.headers with x-match mode.
func headersBind(q, mode string) *proto.Command {
	match := &proto.Table{Fields: []*proto.Field{{Key: "x-match", Value: &proto.Value{Kind: &proto.Value_LongString{LongString: []byte(mode)}}}}}
	return &proto.Command{Cmd: &proto.Command_Bind{Bind: &proto.Bind{Vhost: "/", Source: "amq.headers", Destination: q, Arguments: match}}}
}

// oneNode is the broker of a one-node cluster whose leader made the
// default vhost, and a context that ends with the test.
func oneNode(t *testing.T) (*broker.Broker, context.Context) {
	t.Helper()
	c := clustertest.New(t, 1)
	node := c.WaitForLeader(clustertest.Timeout)
	<-node.Ready()
	b := broker.New(node, nil)
	ctx, cancel := context.WithTimeout(context.Background(), clustertest.Timeout)
	t.Cleanup(cancel)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if !b.VhostExists("/") {
			return errors.New("no default vhost yet")
		}
		return nil
	})
	return b, ctx
}

// A command that committed but whose outcome came back unknown (its
// leader lost its place before it answered) is proposed again when a
// second commit changes nothing: the client gets its declare-ok rather
// than a connection closed by a leader change. What a second commit
// would change (a server-named queue: a second queue) keeps its error,
// and the tries are bounded.
func TestBroker_AnIdempotentCommandOfUnknownOutcomeGoesAgain(t *testing.T) {
	named := &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "q", Durable: true}}}
	serverNamed := &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Durable: true}}}
	exchange := &proto.Command{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{Vhost: "/", Name: "x", Type: "direct", Durable: true}}}
	bind := &proto.Command{Cmd: &proto.Command_Bind{Bind: &proto.Bind{Vhost: "/", Source: "x", Destination: "q", RoutingKey: "k"}}}
	purge := &proto.Command{Cmd: &proto.Command_QueuePurge{QueuePurge: &proto.QueuePurge{Vhost: "/", Name: "q"}}}
	for _, tc := range []struct {
		name   string
		cmds   []*proto.Command // the last is the one whose outcome is lost
		losses int              // how many of its tries report it unknown
		tries  int
		ok     bool
		queues int // queues of the vhost after it
	}{
		{"named queue declare", []*proto.Command{named}, 1, 2, true, 1},
		{"named queue declare, lost every time", []*proto.Command{named}, 5, 3, false, 1},
		{"exchange declare", []*proto.Command{exchange}, 1, 2, true, 0},
		{"bind", []*proto.Command{named, exchange, bind}, 1, 2, true, 1},
		{"server-named queue declare", []*proto.Command{serverNamed}, 1, 1, false, 1},
		{"purge", []*proto.Command{named, purge}, 1, 1, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, ctx := oneNode(t)
			last := tc.cmds[len(tc.cmds)-1]
			for _, cmd := range tc.cmds[:len(tc.cmds)-1] {
				if res, err := b.Submit(ctx, cmd); err != nil || res.GetCode() != 0 {
					t.Fatalf("%v: %v %v", cmd, res, err)
				}
			}
			tries := 0
			broker.ReportOutcomes(b, func(cmd *proto.Command, res *proto.Result, err error) (*proto.Result, error) {
				if cmd != last {
					return res, err
				}
				tries++
				if err == nil && tries <= tc.losses {
					return nil, fmt.Errorf("%w: the leader lost its place", cluster.ErrOutcomeUnknown)
				}
				return res, err
			})
			res, err := b.Submit(ctx, last)
			if tries != tc.tries {
				t.Errorf("%d tries, want %d", tries, tc.tries)
			}
			if got := err == nil && res.GetCode() == 0; got != tc.ok {
				t.Errorf("answered %v %v, want success %v", res, err, tc.ok)
			}
			if !tc.ok && !errors.Is(err, cluster.ErrOutcomeUnknown) {
				t.Errorf("error %v, want the unknown outcome", err)
			}
			if n, _ := b.QueueCount("/", "q"); n != tc.queues {
				t.Errorf("%d queues in the vhost, want %d", n, tc.queues)
			}
		})
	}
}
