package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/raftmq/raftmq/cluster/linksec"
	"github.com/raftmq/raftmq/proto"
)

// TestAdversary runs the outsider's attacks on one cluster of three nodes
// started as the README starts them: RAFTMQ_CLUSTER_SECRET set, no cluster
// TLS, default admin settings. Each attack is a subtest with its own
// assertions.
func TestAdversary(t *testing.T) {
	skipShort(t)
	c := StartCluster(t, 3)
	waitFormed(t, c)
	t.Run("gRPC without the secret", func(t *testing.T) { internalServiceRefusesOutsiders(t, c) })
	t.Run("raft without the secret", func(t *testing.T) { raftRefusesOutsiders(t, c) })
	t.Run("gossip without the secret", func(t *testing.T) { gossipRefusesOutsiders(t, c) })
	t.Run("admin API for raftmqctl", func(t *testing.T) { adminStillServed(t, c) })
	t.Run("an insider's invalid commands", func(t *testing.T) { invalidCommandsFailAlone(t, c) })
}

// invalidCommandsFailAlone: a peer that holds the secret (a buggy node, or
// one of a newer version) forwards an empty command and a command of a kind
// no version knows, between two valid ones, to the leader. The two invalid
// ones are refused, the valid ones commit, and every node keeps running and
// serving: nothing a peer sends can make the log unappliable.
func invalidCommandsFailAlone(t *testing.T, c *Cluster) {
	leader, peer := c.Nodes[0], c.Nodes[1]
	for i, n := range c.Nodes {
		if statusOf(t, n).LeaderID == n.ID {
			leader, peer = n, c.Nodes[(i+1)%len(c.Nodes)]
		}
	}
	// A node takes internal calls from the other servers of the raft
	// configuration only: the insider speaks as a follower.
	insider, err := linksec.SecretTLS([]byte(c.Secret), peer.ID)
	if err != nil {
		t.Fatal(err)
	}
	cfg := insider.ClientConfig()
	cfg.VerifyConnection = nil
	cfg.InsecureSkipVerify = true // the node's name is not its address here
	cc, err := grpc.NewClient(leader.GRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	unknown := &proto.Command{}
	unknown.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.BytesType), 0))
	vhost := func(name string) *proto.Command {
		return &proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: name}}}
	}
	req := &proto.ForwardRequest{Id: 7, Commands: []*proto.Command{vhost("insider-before"), {}, unknown, vhost("insider-after")}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := proto.NewInternalClient(cc).Forward(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(req); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("forward to the leader %s: %v", leader.ID, err)
	}
	t.Logf("leader %s answered: error %v %q, results %v", leader.ID, resp.GetError(), resp.GetErrorText(), resp.GetResults())
	res := resp.GetResults()
	if len(res) != 4 {
		t.Fatalf("%d results for 4 commands: %v", len(res), resp)
	}
	for i, want := range []bool{true, false, false, true} {
		if ok := res[i].GetCode() == 0; ok != want {
			t.Errorf("command %d: code %d %q, want accepted %v", i, res[i].GetCode(), res[i].GetText(), want)
		}
	}
	// Every node still runs, commits and applies: a vhost added through
	// raftmqctl after the attack shows on each, beside the insider's valid
	// ones.
	ctl(t, c.Nodes[1], "add_vhost", "after-the-insider")
	for _, n := range c.Nodes {
		if !n.Running() {
			t.Fatalf("%s stopped after the insider's commands", n.ID)
		}
		err := Eventually(10*time.Second, func() error {
			out := ctl(t, n, "list_vhosts")
			for _, v := range []string{"insider-before", "insider-after", "after-the-insider"} {
				if !strings.Contains(out, v) {
					return fmt.Errorf("%s lists no vhost %s:\n%s", n.ID, v, out)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// adminStillServed: the port that refuses outsiders' internal calls still
// serves raftmqctl's admin calls, plain (loopback, with the admin secret) and over TLS with the CA
// certificate the node wrote into its data dir.
func adminStillServed(t *testing.T, c *Cluster) {
	for _, n := range c.Nodes {
		ctl(t, n, "list_vhosts")
		out := ctl(t, n, "--tls-ca", filepath.Join(n.DataDir, "cluster-ca.pem"), "--username", "guest", "--password", "guest", "list_vhosts")
		if !strings.Contains(out, "/") {
			t.Fatalf("list_vhosts over TLS on %s: %q", n.ID, out)
		}
	}
}

// TestAdversary_NoSecretNoCluster: a node asked to form a cluster without a
// secret (nor cluster TLS) does not start, and says what to set.
func TestAdversary_NoSecretNoCluster(t *testing.T) {
	skipShort(t)
	cmd := exec.Command(Binary(t), "--data-dir", t.TempDir(), "--bootstrap-expect", "3", "--join", FreeAddr(t))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RAFTMQ_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("exit: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	for _, want := range []string{"--cluster-secret", "RAFTMQ_CLUSTER_SECRET", "--cluster-tls-cert"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("the refusal does not mention %s:\n%s", want, out)
		}
	}
}

// status of a node as raftmqctl cluster_status --json gives it (the node's
// admin secret, no password, with the default --admin-auth auto).
type nodeStatus struct {
	NodeID      string `json:"node_id"`
	LeaderID    string `json:"leader_id"`
	Term        string `json:"term"` // protojson writes 64-bit integers as strings
	CommitIndex string `json:"commit_index"`
	Nodes       []struct {
		ID       string `json:"id"`
		Suffrage string `json:"suffrage"`
	} `json:"nodes"`
}

func statusOf(t *testing.T, n *Node) nodeStatus {
	t.Helper()
	out, errOut, code := ctlRun(t, n, "--json", "cluster_status")
	if code != 0 {
		t.Fatalf("cluster_status on %s: exit %d: %s", n.ID, code, errOut)
	}
	var st nodeStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("cluster_status on %s: %v\n%s", n.ID, err, out)
	}
	return st
}

// waitFormed waits until every node sees a leader and three voters.
func waitFormed(t *testing.T, c *Cluster) {
	t.Helper()
	err := Eventually(30*time.Second, func() error {
		for _, n := range c.Nodes {
			st := statusOf(t, n)
			voters := 0
			for _, m := range st.Nodes {
				if m.Suffrage == "voter" {
					voters++
				}
			}
			if st.LeaderID == "" || voters != 3 {
				return fmt.Errorf("%s: leader %q, %d voters", n.ID, st.LeaderID, voters)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// internalCalls opens every method of the Internal service on addr, each
// carrying a command that would make user "evil" an administrator, and
// returns each method's error.
func internalCalls(t *testing.T, addr string, creds credentials.TransportCredentials) map[string]error {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	evil := &proto.ForwardRequest{Id: 1, Commands: []*proto.Command{
		{Cmd: &proto.Command_UserPut{UserPut: &proto.UserPut{Name: "evil", Tags: []string{"administrator"}}}},
	}}
	desc := proto.Internal_ServiceDesc
	out := map[string]error{}
	for _, m := range desc.Methods {
		full := "/" + desc.ServiceName + "/" + m.MethodName
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		out[full] = cc.Invoke(ctx, full, evil, &proto.ForwardResponse{})
		cancel()
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

// internalServiceRefusesOutsiders: a gRPC client without the secret, plain
// or over TLS with a certificate from another secret, calls every internal
// method of every node with a command making an administrator; each call
// is refused, no user appears, and the admin API on the same port still
// answers raftmqctl.
func internalServiceRefusesOutsiders(t *testing.T, c *Cluster) {
	foreign, err := linksec.SecretTLS([]byte(NewSecret(t)), "n1")
	if err != nil {
		t.Fatal(err)
	}
	foreignCreds := func() credentials.TransportCredentials {
		cfg := foreign.ClientConfig()
		cfg.VerifyConnection = nil
		cfg.InsecureSkipVerify = true // the outsider trusts whoever answers
		return credentials.NewTLS(cfg)
	}
	for _, n := range c.Nodes {
		for method, err := range internalCalls(t, n.GRPCAddr, insecure.NewCredentials()) {
			t.Logf("%s %s, plain: %v", n.ID, method, err)
			if status.Code(err) != codes.Unauthenticated {
				t.Errorf("%s %s without the secret: %v, want Unauthenticated", n.ID, method, err)
			}
		}
		for method, err := range internalCalls(t, n.GRPCAddr, foreignCreds()) {
			t.Logf("%s %s, another secret's certificate: %v", n.ID, method, err)
			// The node does not verify the certificate: no TLS session.
			if status.Code(err) != codes.Unavailable {
				t.Errorf("%s %s with another secret's certificate: %v, want Unavailable", n.ID, method, err)
			}
		}
	}
	// Anything a node had taken would be in the log by now; a command
	// through raftmqctl commits after it.
	ctl(t, c.Nodes[0], "add_vhost", "after-the-attack")
	for _, n := range c.Nodes {
		out := ctl(t, n, "list_users")
		if strings.Contains(out, "evil") {
			t.Fatalf("%s lists the outsider's user:\n%s", n.ID, out)
		}
	}
}

// dialOnly is a raft.StreamLayer for a transport that only sends.
type dialOnly struct {
	net.Listener
	dial func(addr string, timeout time.Duration) (net.Conn, error)
}

func (d dialOnly) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return d.dial(string(addr), timeout)
}

// raftRefusesOutsiders: hashicorp/raft's own TCP transport, plain and over
// TLS with another secret's certificate, sends each node an AppendEntries
// with a far higher term and an entry; every one fails, and no node's term
// jumps.
func raftRefusesOutsiders(t *testing.T, c *Cluster) {
	foreign, err := linksec.SecretTLS([]byte(NewSecret(t)), "n1")
	if err != nil {
		t.Fatal(err)
	}
	foreignCfg := foreign.ClientConfig()
	foreignCfg.VerifyConnection = nil
	dials := map[string]func(string, time.Duration) (net.Conn, error){
		"plain": func(addr string, timeout time.Duration) (net.Conn, error) {
			return net.DialTimeout("tcp", addr, timeout)
		},
		"another secret": func(addr string, timeout time.Duration) (net.Conn, error) {
			return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", addr, foreignCfg)
		},
	}
	const bump = 1000
	for name, dial := range dials {
		for _, n := range c.Nodes {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			trans := raft.NewNetworkTransport(dialOnly{Listener: ln, dial: dial}, 1, 3*time.Second, io.Discard)
			req := &raft.AppendEntriesRequest{
				RPCHeader:         raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("intruder"), Addr: []byte(ln.Addr().String())},
				Term:              bump,
				PrevLogEntry:      0,
				PrevLogTerm:       0,
				Entries:           []*raft.Log{{Index: 1, Term: bump, Type: raft.LogCommand, Data: []byte("garbage")}},
				LeaderCommitIndex: 1,
			}
			var resp raft.AppendEntriesResponse
			err = trans.AppendEntries(raft.ServerID(n.ID), raft.ServerAddress(n.RaftAddr), req, &resp)
			_ = trans.Close()
			t.Logf("raft AppendEntries to %s (%s): %v", n.ID, name, err)
			if err == nil {
				t.Errorf("%s: AppendEntries to %s went through: %+v", name, n.ID, resp)
			}
		}
	}
	for _, n := range c.Nodes {
		st := statusOf(t, n)
		var term uint64
		if _, err := fmt.Sscan(st.Term, &term); err != nil || term >= bump {
			t.Fatalf("%s: term %q after the intruder's AppendEntries (%v)", n.ID, st.Term, err)
		}
	}
	ctl(t, c.Nodes[1], "add_vhost", "raft-still-works")
}

// gossipRefusesOutsiders: a memberlist node without the secret, and one
// with another secret's key, try to join the nodes' gossip: they get no
// member and no node ever lists them. A memberlist node with the key
// derived from the right secret gets in, so the watch could have seen a
// join.
func gossipRefusesOutsiders(t *testing.T, c *Cluster) {
	seeds := make([]string, 0, len(c.Nodes))
	for _, n := range c.Nodes {
		seeds = append(seeds, n.GossipAddr)
	}
	spy := func(name string, key []byte) *memberlist.Memberlist {
		mc := memberlist.DefaultLANConfig()
		mc.Name = name
		mc.BindAddr = "127.0.0.1"
		mc.BindPort = 0
		mc.AdvertisePort = 0
		mc.Logger = nil
		mc.LogOutput = io.Discard
		if key != nil {
			kr, err := memberlist.NewKeyring(nil, key)
			if err != nil {
				t.Fatal(err)
			}
			mc.Keyring = kr
			mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
		}
		ml, err := memberlist.Create(mc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ml.Shutdown() })
		return ml
	}
	otherKey, err := linksec.SecretGossipKey([]byte(NewSecret(t)))
	if err != nil {
		t.Fatal(err)
	}
	outsiders := map[string]*memberlist.Memberlist{
		"spy-plain":        spy("spy-plain", nil),
		"spy-other-secret": spy("spy-other-secret", otherKey),
	}
	for name, ml := range outsiders {
		k, err := ml.Join(seeds)
		t.Logf("gossip join by %s: %d nodes answered: %v", name, k, err)
		if k != 0 {
			t.Fatalf("%s joined %d nodes", name, k)
		}
	}
	listed := func(id string) error {
		for _, n := range c.Nodes {
			for _, m := range statusOf(t, n).Nodes {
				if m.ID == id {
					return fmt.Errorf("%s lists %s", n.ID, id)
				}
			}
		}
		return nil
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		for name, ml := range outsiders {
			if k := ml.NumMembers(); k != 1 {
				t.Fatalf("%s sees %d members", name, k)
			}
			if err := listed(name); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(200 * time.Millisecond) // sampling a condition that must stay false
	}

	key, err := linksec.SecretGossipKey([]byte(c.Secret))
	if err != nil {
		t.Fatal(err)
	}
	insider := spy("insider", key)
	if k, err := insider.Join(seeds); k == 0 {
		t.Fatalf("a gossip node with the secret's key joined nobody: %v", err)
	}
	if err := Eventually(15*time.Second, func() error {
		if listed("insider") == nil {
			return errors.New("no node lists the gossip node with the secret's key")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
