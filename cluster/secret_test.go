package cluster_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/linksec"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

var (
	testSecret  = []byte("correct horse battery staple 42")
	otherSecret = []byte("another cluster's secret, 32 b.")
)

func secretTLS(t *testing.T, secret []byte, name string) *linksec.TLS {
	t.Helper()
	sec, err := linksec.SecretTLS(secret, name)
	if err != nil {
		t.Fatal(err)
	}
	return sec
}

// secretCluster is a three-node cluster sharing testSecret, with a leader.
func secretCluster(t *testing.T) *clustertest.Cluster {
	t.Helper()
	c := clustertest.New(t, 3, clustertest.WithSecret(t, testSecret))
	c.WaitForLeader(clustertest.Timeout)
	return c
}

func TestSecret_ClusterFormsAndCommits(t *testing.T) {
	c := secretCluster(t)
	f := c.Followers()[0]
	mustSubmit(t, f, vhostPut("with-secret"), queueDeclare("/", "q"), publish("/", "q", "forwarded over TLS"))
	c.AssertSameDigest(t)
}

// vhostExists reports whether n's applied state has the vhost.
func vhostExists(n *cluster.Node, name string) (ok bool) {
	n.View(func(m *fsm.Machine) { ok = m.VhostExists(name) })
	return ok
}

// callInternal opens every method of the Internal service on addr with the
// given credentials, each carrying the command that makes vhost "evil" where
// a request carries commands, and returns each method's error.
func callInternal(t *testing.T, addr string, creds credentials.TransportCredentials) map[string]error {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	evil := &proto.ForwardRequest{Id: 1, Commands: []*proto.Command{vhostPut("evil")}}
	out := map[string]error{}
	desc := proto.Internal_ServiceDesc
	for _, m := range desc.Methods {
		full := "/" + desc.ServiceName + "/" + m.MethodName
		out[full] = cc.Invoke(ctxT(t, 5*time.Second), full, evil, &proto.ForwardResponse{})
	}
	for i := range desc.Streams {
		sd := desc.Streams[i]
		full := "/" + desc.ServiceName + "/" + sd.StreamName
		out[full] = func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st, err := cc.NewStream(ctx, &sd, full)
			if err != nil {
				return err
			}
			// A server that refused the stream may have ended it before the
			// send: Send then says io.EOF, and Recv gives the status.
			if err := st.SendMsg(evil); err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			return st.RecvMsg(&proto.ForwardResponse{})
		}()
	}
	if len(out) == 0 {
		t.Fatal("the Internal service has no method")
	}
	return out
}

// TestSecret_InternalServiceRefusesOutsiders calls every method of the
// Internal service on the leader: without TLS, over TLS without a client
// certificate, with a certificate of another secret, and with one of the
// right secret that names no server of the raft configuration. None gets a
// command in; a member's certificate does (so the refusals are the check's,
// not a broken connection).
func TestSecret_InternalServiceRefusesOutsiders(t *testing.T) {
	c := secretCluster(t)
	l := c.WaitForLeader(clustertest.Timeout)
	addr := c.Nodes[c.Index(l.NodeID())].Config.GRPCAddr
	trustAny := func(cert *linksec.TLS) credentials.TransportCredentials {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true} // the client side's check is not what is tested
		if cert != nil {
			cfg.Certificates = []tls.Certificate{cert.Certificate}
		}
		return credentials.NewTLS(cfg)
	}
	for _, tc := range []struct {
		name  string
		creds credentials.TransportCredentials
		want  []codes.Code
	}{
		{"plain", insecure.NewCredentials(), []codes.Code{codes.Unauthenticated}},
		{"TLS without a certificate", trustAny(nil), []codes.Code{codes.Unauthenticated}},
		// The handshake fails: the server does not verify the certificate.
		{"certificate of another secret", trustAny(secretTLS(t, otherSecret, "node1")), []codes.Code{codes.Unavailable}},
		{"certificate naming no server", credentials.NewTLS(secretTLS(t, testSecret, "ops").ClientConfig()), []codes.Code{codes.PermissionDenied}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for method, err := range callInternal(t, addr, tc.creds) {
				if code := status.Code(err); !containsCode(tc.want, code) {
					t.Errorf("%s: %v (code %v), want %v", method, err, code, tc.want)
				}
			}
		})
	}
	other := c.Nodes[(c.Index(l.NodeID())+1)%3].ID
	member := callInternal(t, addr, credentials.NewTLS(secretTLS(t, testSecret, other).ClientConfig()))
	if err := member["/raftmq.v1.Internal/Forward"]; err != nil {
		t.Fatalf("Forward with %s's certificate: %v", other, err)
	}
	// The member's forward committed "evil"; the refused ones did not get
	// anything in before it: each node has it exactly once, from the member.
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		for _, n := range c.Live() {
			if !vhostExists(n, "evil") {
				return fmt.Errorf("%s lacks the member's vhost", n.NodeID())
			}
		}
		return nil
	})
}

// TestSecret_RefusedForwardCommitsNothing checks the state after refused
// calls only: no vhost appears.
func TestSecret_RefusedForwardCommitsNothing(t *testing.T) {
	c := secretCluster(t)
	l := c.WaitForLeader(clustertest.Timeout)
	addr := c.Nodes[c.Index(l.NodeID())].Config.GRPCAddr
	for _, err := range callInternal(t, addr, insecure.NewCredentials()) {
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("plain call: %v", err)
		}
	}
	mustSubmit(t, l, tick()) // anything accepted before this is applied by now
	for _, n := range c.Live() {
		if vhostExists(n, "evil") {
			t.Fatalf("%s applied the outsider's command", n.NodeID())
		}
	}
}

func containsCode(cs []codes.Code, c codes.Code) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
}

// dialLayer is a raft.StreamLayer that only dials, with dial.
type dialLayer struct {
	net.Listener
	dial func(addr string, timeout time.Duration) (net.Conn, error)
}

func (d dialLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return d.dial(string(addr), timeout)
}

// TestSecret_RaftRefusesOutsiders sends AppendEntries with a higher term,
// through hashicorp/raft's own TCP transport, to a follower: plain, with a
// certificate of another secret, and with a certificate of the right
// secret naming no server. Each fails, and the follower's term and log do
// not move; the cluster still commits.
func TestSecret_RaftRefusesOutsiders(t *testing.T) {
	c := secretCluster(t)
	f := c.Followers()[0]
	l := c.WaitForLeader(clustertest.Timeout)
	lid, _ := l.Leader()
	tlsLayer := func(sec *linksec.TLS) func(string, time.Duration) (net.Conn, error) {
		cfg := sec.ClientConfig()
		cfg.VerifyConnection = nil // the outsider trusts whoever answers
		return func(addr string, timeout time.Duration) (net.Conn, error) {
			return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", addr, cfg)
		}
	}
	plain := func(addr string, timeout time.Duration) (net.Conn, error) {
		return net.DialTimeout("tcp", addr, timeout)
	}
	for _, tc := range []struct {
		name string
		dial func(string, time.Duration) (net.Conn, error)
	}{
		{"plain", plain},
		{"certificate of another secret", tlsLayer(secretTLS(t, otherSecret, lid))},
		{"certificate naming no server", tlsLayer(secretTLS(t, testSecret, "ops"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			trans := raft.NewNetworkTransport(dialLayer{Listener: ln, dial: tc.dial}, 1, 3*time.Second, io.Discard)
			defer trans.Close()
			before := f.Stats()
			req := &raft.AppendEntriesRequest{
				RPCHeader:         raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("intruder"), Addr: []byte(ln.Addr().String())},
				Term:              before.Term + 100,
				PrevLogEntry:      before.LastLogIndex,
				PrevLogTerm:       before.Term,
				Entries:           []*raft.Log{{Index: before.LastLogIndex + 1, Term: before.Term + 100, Type: raft.LogCommand, Data: []byte("garbage")}},
				LeaderCommitIndex: before.LastLogIndex + 1,
			}
			var resp raft.AppendEntriesResponse
			err = trans.AppendEntries(raft.ServerID(f.NodeID()), raft.ServerAddress(f.RaftAddr()), req, &resp)
			if err == nil {
				t.Fatalf("AppendEntries went through: %+v", resp)
			}
			if after := f.Stats(); after.Term >= req.Term {
				t.Fatalf("the follower took the intruder's term: %d", after.Term)
			}
		})
	}
	// The member certificate's handshake passes (so the refusals above are
	// the certificate checks'): a byte that is no raft RPC then gets EOF.
	conn, err := tls.Dial("tcp", f.RaftAddr(), secretTLS(t, testSecret, lid).ClientConfig())
	if err != nil {
		t.Fatalf("handshake with the leader's name: %v", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte{0xff}); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "certificate") {
		t.Fatalf("after the handshake with the leader's name: %v, want EOF", err)
	}
	stillWorks(t, c)
	c.AssertSameDigest(t)
}

// TestSecret_GossipKeepsOutsidersOut starts a node with no secret and one
// with another secret: neither is ever seen by the cluster's gossip. A node
// with the secret, started last, gets in (so the window could have seen a
// join).
func TestSecret_GossipKeepsOutsidersOut(t *testing.T) {
	c := secretCluster(t)
	none := c.StartOutsider("node-no-secret", func(cfg *cluster.Config) { cfg.TLS, cfg.GossipKeys = nil, nil })
	other := c.StartOutsider("node-other-secret", func(cfg *cluster.Config) { clustertest.SecretConfig(t, otherSecret, cfg) })
	t.Run("no secret", func(t *testing.T) { assertKeptOut(t, c, none, true) })
	t.Run("other secret", func(t *testing.T) { assertKeptOut(t, c, other, true) })
	good := c.StartOutsider("node-with-secret", func(cfg *cluster.Config) { clustertest.SecretConfig(t, testSecret, cfg) })
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		l := c.Leader()
		if l == nil {
			return errors.New("no leader")
		}
		if v := voters(l); len(v) != 4 {
			return fmt.Errorf("voters %v, want 4", v)
		}
		if good.Node().AppliedIndex() < l.AppliedIndex() {
			return fmt.Errorf("the new node applied %d, the leader %d", good.Node().AppliedIndex(), l.AppliedIndex())
		}
		return nil
	})
	mustSubmit(t, good.Node(), tick())
}
