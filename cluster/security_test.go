package cluster_test

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/linksec"
	"github.com/raftmq/raftmq/internal/testpki"
	"github.com/raftmq/raftmq/proto"
)

func gossipKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// secureCluster is a 3-node cluster with mutual TLS from ca and gossip
// encrypted with key, with a leader.
func secureCluster(t *testing.T, ca *testpki.CA, key []byte) *clustertest.Cluster {
	t.Helper()
	c := clustertest.New(t, 3, clustertest.WithTLS(t, ca), clustertest.WithGossipKeys(key))
	c.WaitForLeader(clustertest.Timeout)
	return c
}

// voters lists the voters node n sees in the raft configuration.
func voters(n *cluster.Node) []string {
	var out []string
	for _, m := range n.Members() {
		if m.Suffrage == "voter" {
			out = append(out, m.ID)
		}
	}
	return out
}

// seen reports whether node n knows id at all (gossip or raft).
func seen(n *cluster.Node, id string) (cluster.MemberInfo, bool) {
	for _, m := range n.Members() {
		if m.ID == id {
			return m, true
		}
	}
	return cluster.MemberInfo{}, false
}

// neverWindow is how long a node that must not get in is watched. With the
// test gossip timings (probe every 200 ms, push-pull every second, join
// retried every 100 ms) and the leader reconciling every 200 ms, a node
// that can get in is a gossip member within about a second and a voter a
// few reconcile rounds later (TestSecurity_ClusterWithTLSAndGossipKey's
// fourth node shows it): 4 s is several times both.
const neverWindow = 4 * time.Second

// never fails the test as soon as bad returns an error, checking every 20 ms
// for the whole window.
func never(t *testing.T, window time.Duration, bad func() error) {
	t.Helper()
	deadline := time.Now().Add(window)
	for time.Now().Before(deadline) {
		if err := bad(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // sampling a condition that must stay false
	}
}

func TestSecurity_ClusterWithTLSAndGossipKey(t *testing.T) {
	ca := testpki.New(t, "raftmq test CA")
	c := secureCluster(t, ca, gossipKey(t))
	// Forwarding runs over TLS: a follower's submission reaches the log.
	f := c.Followers()[0]
	mustSubmit(t, f, vhostPut("secure"), queueDeclare("/", "q"), publish("/", "q", "over tls"))
	c.AssertSameDigest(t)

	// A node with the key and a certificate of the CA naming it gets in.
	out := c.StartOutsider("node9", func(cfg *cluster.Config) { cfg.TLS = clustertest.NodeTLS(t, ca, cfg.NodeID) })
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		l := c.Leader()
		if l == nil {
			return errors.New("no leader")
		}
		if v := voters(l); len(v) != 4 {
			return fmt.Errorf("voters %v, want 4", v)
		}
		if out.Node().AppliedIndex() < l.AppliedIndex() {
			return fmt.Errorf("node9 applied %d, leader %d", out.Node().AppliedIndex(), l.AppliedIndex())
		}
		return nil
	})
	mustSubmit(t, out.Node(), tick())
}

// stillWorks checks that the three nodes still commit through a follower.
// On a loaded machine a leader can lose its lease now and then; a tick is
// harmless to repeat, so an unknown outcome is retried.
func stillWorks(t *testing.T, c *clustertest.Cluster) {
	t.Helper()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		fs := c.Followers()
		if len(fs) == 0 || c.Leader() == nil {
			return errors.New("no leader")
		}
		_, err := fs[0].Submit(ctxT(t, 5*time.Second), tick())
		return err
	})
}

// assertKeptOut watches the window: the outsider never becomes a voter, the
// configuration keeps the three servers, and, when gossipToo, no node even
// sees it through gossip.
func assertKeptOut(t *testing.T, c *clustertest.Cluster, out *clustertest.Node, gossipToo bool) {
	t.Helper()
	never(t, neverWindow, func() error {
		for _, n := range c.Live() {
			if v := voters(n); len(v) != 3 {
				return fmt.Errorf("%s sees voters %v, want the 3 nodes", n.NodeID(), v)
			}
			m, ok := seen(n, out.ID)
			if ok && m.Suffrage != "" {
				return fmt.Errorf("%s has %s in the raft configuration as %s", n.NodeID(), out.ID, m.Suffrage)
			}
			if ok && gossipToo {
				return fmt.Errorf("%s sees %s through gossip: %+v", n.NodeID(), out.ID, m)
			}
		}
		if gossipToo {
			if ms := out.Node().Members(); len(ms) != 1 {
				return fmt.Errorf("the outsider sees %d members", len(ms))
			}
		}
		if idx := out.Node().AppliedIndex(); idx != 0 {
			return fmt.Errorf("the outsider applied index %d", idx)
		}
		return nil
	})
}

func TestSecurity_WrongGossipKeyCannotJoin(t *testing.T) {
	ca := testpki.New(t, "raftmq test CA")
	key := gossipKey(t)
	c := secureCluster(t, ca, key)
	other := gossipKey(t)
	if bytes.Equal(other, key) {
		t.Fatal("two random keys are equal")
	}
	// Their certificates are good: only the key keeps them out.
	wrong := c.StartOutsider("node-wrong-key", func(cfg *cluster.Config) {
		cfg.GossipKeys = [][]byte{other}
		cfg.TLS = clustertest.NodeTLS(t, ca, cfg.NodeID)
	})
	none := c.StartOutsider("node-no-key", func(cfg *cluster.Config) {
		cfg.GossipKeys = nil
		cfg.TLS = clustertest.NodeTLS(t, ca, cfg.NodeID)
	})
	t.Run("wrong key", func(t *testing.T) { assertKeptOut(t, c, wrong, true) })
	t.Run("no key", func(t *testing.T) { assertKeptOut(t, c, none, true) })
	stillWorks(t, c)
}

func TestSecurity_ForeignCertificateCannotJoin(t *testing.T) {
	ca := testpki.New(t, "raftmq test CA")
	c := secureCluster(t, ca, gossipKey(t))
	foreign := testpki.New(t, "another CA")
	// The gossip key lets these nodes into gossip; raft is what they must
	// not reach.
	otherCA := c.StartOutsider("node-other-ca", func(cfg *cluster.Config) { cfg.TLS = clustertest.NodeTLS(t, foreign, cfg.NodeID) })
	// A certificate of the right CA naming another node does not do either.
	misnamed := c.StartOutsider("node-misnamed", func(cfg *cluster.Config) { cfg.TLS = clustertest.NodeTLS(t, ca, "somebody-else") })
	plain := c.StartOutsider("node-plain", func(cfg *cluster.Config) { cfg.TLS = nil })
	// They are gossip members (the window below would pass vacuously if
	// they never got that far).
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		l := c.Leader()
		if l == nil {
			return errors.New("no leader")
		}
		for _, id := range []string{otherCA.ID, misnamed.ID, plain.ID} {
			if m, ok := seen(l, id); !ok || m.Health != cluster.HealthAlive {
				return fmt.Errorf("the leader does not see %s alive: %+v", id, m)
			}
		}
		return nil
	})
	t.Run("other CA", func(t *testing.T) { assertKeptOut(t, c, otherCA, false) })
	t.Run("misnamed", func(t *testing.T) { assertKeptOut(t, c, misnamed, false) })
	t.Run("plain", func(t *testing.T) { assertKeptOut(t, c, plain, false) })
	stillWorks(t, c)
}

func TestParseGossipKeys(t *testing.T) {
	keys, err := linksec.ParseGossipKeys("AAAAAAAAAAAAAAAAAAAAAA==, AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
	if err != nil || len(keys) != 2 || len(keys[0]) != 16 || len(keys[1]) != 32 {
		t.Fatalf("keys %v, err %v", keys, err)
	}
	for _, bad := range []string{"", "not base64!", "AAAA"} {
		if _, err := linksec.ParseGossipKeys(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestSecurity_OnlyMembersReachRaftAndForwarding dials a node's raft port
// and forwarding service with certificates of the cluster CA that name no
// member (an operator's, say): both refuse them, while a member's
// certificate is accepted by the same checks.
func TestSecurity_OnlyMembersReachRaftAndForwarding(t *testing.T) {
	ca := testpki.New(t, "raftmq test CA")
	c := secureCluster(t, ca, gossipKey(t))
	l := c.WaitForLeader(clustertest.Timeout)
	ops := clustertest.NodeTLS(t, ca, "ops")

	// Raft: the handshake is refused once the node sees the certificate
	// (with TLS 1.3 that is on the first read).
	raftTalk := func(sec *linksec.TLS) error {
		conn, err := tls.Dial("tcp", l.RaftAddr(), sec.ClientConfig())
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write([]byte{0xff}); err != nil { // no RPC type: the node hangs up
			return err
		}
		_, err = conn.Read(make([]byte, 1))
		return err
	}
	if err := raftTalk(ops); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("raft with an operator's certificate: %v, want a refused certificate", err)
	}
	// A member's certificate gets through the handshake (the byte sent is
	// no raft RPC, so the node then drops the connection: EOF, not a TLS
	// alert).
	if err := raftTalk(clustertest.NodeTLS(t, ca, "node1")); err == nil || strings.Contains(err.Error(), "certificate") {
		t.Fatalf("raft with node1's certificate: %v, want the handshake to pass", err)
	}

	// Forwarding.
	forward := func(sec *linksec.TLS) error {
		cc, err := grpc.NewClient(c.Nodes[c.Index(l.NodeID())].Config.GRPCAddr,
			grpc.WithTransportCredentials(credentials.NewTLS(sec.ClientConfig())))
		if err != nil {
			return err
		}
		defer cc.Close()
		stream, err := proto.NewInternalClient(cc).Forward(ctxT(t, 10*time.Second))
		if err != nil {
			return err
		}
		// A server that refused the stream may have ended it before the
		// send: Send then says io.EOF, and Recv gives the status.
		if err := stream.Send(&proto.ForwardRequest{Id: 1, Commands: []*proto.Command{tick()}}); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		_, err = stream.Recv()
		return err
	}
	if err := forward(ops); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("forwarding with an operator's certificate: %v, want PermissionDenied", err)
	}
	other := c.Nodes[(c.Index(l.NodeID())+1)%3].ID
	if err := forward(clustertest.NodeTLS(t, ca, other)); err != nil {
		t.Fatalf("forwarding with %s's certificate: %v", other, err)
	}
}

// TestSecurity_BootstrapLeavesOutForeignCertificates starts four nodes that
// bootstrap once three see each other; node0, the lowest id, has a
// certificate of another CA. The others leave it out and bootstrap
// without it (node0, unable to verify anyone, bootstraps nothing).
func TestSecurity_BootstrapLeavesOutForeignCertificates(t *testing.T) {
	ca := testpki.New(t, "raftmq test CA")
	foreign := testpki.New(t, "another CA")
	c := clustertest.New(t, 4, clustertest.WithBootstrapExpect(3), clustertest.WithTLS(t, ca),
		clustertest.WithGossipKeys(gossipKey(t)),
		clustertest.WithConfig(func(i int, cfg *cluster.Config) {
			if i == 0 {
				cfg.TLS = clustertest.NodeTLS(t, foreign, cfg.NodeID)
			}
		}))
	want := []string{"node1", "node2", "node3"}
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		for _, nd := range c.Nodes[1:] {
			n := nd.Node()
			if v := voters(n); fmt.Sprint(v) != fmt.Sprint(want) {
				return fmt.Errorf("%s sees voters %v", n.NodeID(), v)
			}
			if id, _ := n.Leader(); id == "" || id == "node0" {
				return fmt.Errorf("%s sees leader %q", n.NodeID(), id)
			}
		}
		return nil
	})
	if v := voters(c.Nodes[0].Node()); len(v) != 0 {
		t.Fatalf("node0 has a raft configuration: %v", v)
	}
	mustSubmit(t, c.Nodes[1].Node(), tick())
}

// TestSecurity_GossipMemberOutsideRaftIsRefused: a node of the cluster's
// gossip (it has the key) whose certificate of the cluster CA names it but
// is for client use only (an administrator's, say) is never made a voter,
// since the leader checks the server certificate of a member's raft
// address. Being a gossip member must not let it forward commands nor open
// raft connections either: those need a server of the raft configuration.
func TestSecurity_GossipMemberOutsideRaftIsRefused(t *testing.T) {
	ca := testpki.New(t, "raftmq test CA")
	c := secureCluster(t, ca, gossipKey(t))
	const id = "node-client-cert"
	certPEM, keyPEM := testpki.EncodePEM(t, ca.Issue(t, testpki.Client, id, id, "127.0.0.1"))
	sec, err := linksec.NewTLS(certPEM, keyPEM, ca.PEM())
	if err != nil {
		t.Fatal(err)
	}
	c.StartOutsider(id, func(cfg *cluster.Config) { cfg.TLS = sec })
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		l := c.Leader()
		if l == nil {
			return errors.New("no leader")
		}
		if m, ok := seen(l, id); !ok || m.Health != cluster.HealthAlive || m.Suffrage != "" {
			return fmt.Errorf("the leader sees %s as %+v, want an alive gossip member outside raft", id, m)
		}
		return nil
	})
	l := c.WaitForLeader(clustertest.Timeout)
	cc, err := grpc.NewClient(c.Nodes[c.Index(l.NodeID())].Config.GRPCAddr,
		grpc.WithTransportCredentials(credentials.NewTLS(sec.ClientConfig())))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	stream, err := proto.NewInternalClient(cc).Forward(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&proto.ForwardRequest{Id: 1, Commands: []*proto.Command{vhostPut("gossip-only")}}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("forwarding from a gossip member outside raft: %v, want PermissionDenied", err)
	}
	// Raft: the leader knows itself as leader, so only servers of its
	// configuration get through.
	conn, err := tls.Dial("tcp", l.RaftAddr(), sec.ClientConfig())
	if err == nil {
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = conn.Write([]byte{0xff})
		_, err = conn.Read(make([]byte, 1))
	}
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("raft from a gossip member outside raft: %v, want a refused certificate", err)
	}
	stillWorks(t, c)
}
