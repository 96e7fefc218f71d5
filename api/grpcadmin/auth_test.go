package grpcadmin

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/api/client"
	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/api/ops/opstest"
	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/linksec"
	"github.com/raftmq/raftmq/internal/testpki"
	"github.com/raftmq/raftmq/proto"
)

var (
	remoteAddr   = &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 40000}
	loopbackAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
)

// callCtx is the server-side context of a call from addr with the given
// credentials ("" user: none) and, when cert is not nil, a verified TLS
// client certificate.
func callCtx(addr net.Addr, user, password string, cert *x509.Certificate) context.Context {
	p := &peer.Peer{Addr: addr}
	if cert != nil {
		p.AuthInfo = credentials.TLSInfo{State: tls.ConnectionState{
			PeerCertificates: []*x509.Certificate{cert},
			VerifiedChains:   [][]*x509.Certificate{{cert}},
		}}
	}
	ctx := peer.NewContext(context.Background(), p)
	if user != "" {
		tok := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Basic "+tok))
	}
	return ctx
}

// leafNamed is a certificate of ca naming name.
func leafNamed(t *testing.T, ca *testpki.CA, name string) *x509.Certificate {
	t.Helper()
	leaf, err := x509.ParseCertificate(clustertest.NodeTLS(t, ca, name).Certificate.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

func TestAuth_Check(t *testing.T) {
	n := opstest.AuthNode()
	ca := testpki.New(t, "test CA")
	const (
		write = "/raftmq.v1.Admin/AddUser"
		read  = "/raftmq.v1.Admin/ListQueues"
		users = "/raftmq.v1.Admin/ListUsers"
	)
	nodeCert := leafNamed(t, ca, "n2")
	opsCert := leafNamed(t, ca, "ops")
	for _, tc := range []struct {
		name   string
		mode   AuthMode
		method string
		ctx    context.Context
		want   codes.Code
	}{
		{"auto: loopback without credentials", AuthAuto, write, callCtx(loopbackAddr, "", "", nil), codes.Unauthenticated},
		{"auto: loopback administrator", AuthAuto, write, callCtx(loopbackAddr, "root", "pw-root", nil), codes.OK},
		{"loopback: loopback needs nothing", AuthLoopback, write, callCtx(loopbackAddr, "", "", nil), codes.OK},
		{"loopback: remote without credentials", AuthLoopback, write, callCtx(remoteAddr, "", "", nil), codes.Unauthenticated},
		{"auto: remote without credentials", AuthAuto, write, callCtx(remoteAddr, "", "", nil), codes.Unauthenticated},
		{"auto: remote administrator", AuthAuto, write, callCtx(remoteAddr, "root", "pw-root", nil), codes.OK},
		{"auto: wrong password", AuthAuto, write, callCtx(remoteAddr, "root", "pw-joe", nil), codes.Unauthenticated},
		{"auto: unknown user", AuthAuto, read, callCtx(remoteAddr, "nobody", "pw-nobody", nil), codes.Unauthenticated},
		{"auto: no tags", AuthAuto, read, callCtx(remoteAddr, "joe", "pw-joe", nil), codes.PermissionDenied},
		{"auto: no tags writing", AuthAuto, write, callCtx(remoteAddr, "joe", "pw-joe", nil), codes.PermissionDenied},
		{"monitoring reads queues", AuthAuto, read, callCtx(remoteAddr, "watcher", "pw-watcher", nil), codes.OK},
		{"monitoring does not write", AuthAuto, write, callCtx(remoteAddr, "watcher", "pw-watcher", nil), codes.PermissionDenied},
		{"monitoring does not list users", AuthAuto, users, callCtx(remoteAddr, "watcher", "pw-watcher", nil), codes.PermissionDenied},
		{"monitoring does not read the environment", AuthAuto, "/raftmq.v1.Admin/Environment", callCtx(remoteAddr, "watcher", "pw-watcher", nil), codes.PermissionDenied},
		// The export carries password hashes: administrators only.
		{"monitoring does not export definitions", AuthAuto, "/raftmq.v1.Admin/ExportDefinitions", callCtx(remoteAddr, "watcher", "pw-watcher", nil), codes.PermissionDenied},
		{"always: loopback needs credentials", AuthAlways, write, callCtx(loopbackAddr, "", "", nil), codes.Unauthenticated},
		{"always: loopback administrator", AuthAlways, write, callCtx(loopbackAddr, "root", "pw-root", nil), codes.OK},
		{"never: remote without credentials", AuthNever, write, callCtx(remoteAddr, "", "", nil), codes.OK},
		{"a member's certificate", AuthAlways, write, callCtx(remoteAddr, "", "", nodeCert), codes.OK},
		{"a certificate naming no member", AuthAlways, write, callCtx(remoteAddr, "", "", opsCert), codes.Unauthenticated},
		{"a certificate naming no member, with credentials", AuthAlways, write, callCtx(remoteAddr, "root", "pw-root", opsCert), codes.OK},
		{"internal service is not checked here", AuthAlways, "/raftmq.v1.Internal/Forward", callCtx(remoteAddr, "", "", nil), codes.OK},
	} {
		err := NewAuth(tc.mode, n).AllowPlaintext().Check(tc.ctx, tc.method)
		if got := status.Code(err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// Without AllowPlaintext, credentials from beyond loopback count only
	// over TLS; loopback and members are unaffected.
	tlsCtx := func(addr net.Addr, user, password string) context.Context {
		ctx := callCtx(addr, user, password, nil)
		p, _ := peer.FromContext(ctx)
		p.AuthInfo = credentials.TLSInfo{}
		return ctx
	}
	for _, tc := range []struct {
		name string
		mode AuthMode
		ctx  context.Context
		want codes.Code
	}{
		{"remote administrator in clear", AuthAuto, callCtx(remoteAddr, "root", "pw-root", nil), codes.Unauthenticated},
		{"remote administrator over TLS", AuthAuto, tlsCtx(remoteAddr, "root", "pw-root"), codes.OK},
		{"remote without credentials over TLS", AuthAuto, tlsCtx(remoteAddr, "", ""), codes.Unauthenticated},
		{"always: loopback administrator in clear", AuthAlways, callCtx(loopbackAddr, "root", "pw-root", nil), codes.OK},
		{"loopback: loopback in clear", AuthLoopback, callCtx(loopbackAddr, "", "", nil), codes.OK},
		{"a member's certificate", AuthAlways, callCtx(remoteAddr, "", "", nodeCert), codes.OK},
	} {
		err := NewAuth(tc.mode, n).Check(tc.ctx, write)
		if got := status.Code(err); got != tc.want {
			t.Errorf("TLS required, %s: %v, want %v", tc.name, err, tc.want)
		}
		if tc.name == "remote administrator in clear" && !strings.Contains(status.Convert(err).Message(), "--admin-plaintext") {
			t.Errorf("refusal does not say how to fix it: %v", err)
		}
	}
	if err := NewAuth(AuthAuto, nil).Check(callCtx(remoteAddr, "root", "pw-root", nil), write); status.Code(err) != codes.Unavailable {
		t.Errorf("before SetNode: %v", err)
	}
}

// withSecret adds a local admin secret to a call's metadata.
func withSecret(ctx context.Context, secret string) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	md = md.Copy()
	md.Set(client.SecretKey, secret)
	return metadata.NewIncomingContext(ctx, md)
}

// TestAuth_LocalSecret: in auto mode the caller's address proves nothing;
// the node's local admin secret does, and a wrong one is refused like a
// wrong password.
func TestAuth_LocalSecret(t *testing.T) {
	n := opstest.AuthNode()
	secret := strings.Repeat("ab", 32)
	const write = "/raftmq.v1.Admin/AddUser"
	for _, tc := range []struct {
		name      string
		mode      AuthMode
		plaintext bool
		ctx       context.Context
		want      codes.Code
	}{
		{"auto: loopback with the secret", AuthAuto, false, withSecret(callCtx(loopbackAddr, "", "", nil), secret), codes.OK},
		{"auto: loopback without it", AuthAuto, false, callCtx(loopbackAddr, "", "", nil), codes.Unauthenticated},
		{"auto: loopback with a wrong one", AuthAuto, false, withSecret(callCtx(loopbackAddr, "", "", nil), strings.Repeat("cd", 32)), codes.Unauthenticated},
		{"auto: an empty one", AuthAuto, false, withSecret(callCtx(loopbackAddr, "", "", nil), ""), codes.Unauthenticated},
		{"auto: a wrong one beside a password", AuthAuto, false, withSecret(callCtx(loopbackAddr, "root", "pw-root", nil), "nope"), codes.OK},
		{"auto: a wrong one beside a wrong password", AuthAuto, false, withSecret(callCtx(loopbackAddr, "root", "pw-joe", nil), "nope"), codes.Unauthenticated},
		{"auto: remote with the secret in clear", AuthAuto, false, withSecret(callCtx(remoteAddr, "", "", nil), secret), codes.Unauthenticated},
		{"auto: remote with the secret, plaintext allowed", AuthAuto, true, withSecret(callCtx(remoteAddr, "", "", nil), secret), codes.OK},
		{"loopback: the secret from loopback", AuthLoopback, false, withSecret(callCtx(loopbackAddr, "", "", nil), "nope"), codes.OK},
		{"always: the secret is not taken", AuthAlways, false, withSecret(callCtx(loopbackAddr, "", "", nil), secret), codes.Unauthenticated},
	} {
		a := NewAuth(tc.mode, n).SetLocalSecret([]byte(secret))
		if tc.plaintext {
			a.AllowPlaintext()
		}
		err := a.Check(tc.ctx, write)
		if got := status.Code(err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// Without a secret set (mode always, or a node built without one),
	// presenting any secret, even an empty one, lets nobody in.
	err := NewAuth(AuthAuto, n).Check(withSecret(callCtx(loopbackAddr, "", "", nil), ""), write)
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(status.Convert(err).Message(), "--data-dir") {
		t.Errorf("no secret set: %v", err)
	}
}

func TestAuth_Interceptors(t *testing.T) {
	a := NewAuth(AuthAlways, opstest.AuthNode()).AllowPlaintext()
	called := false
	_, err := a.UnaryInterceptor()(callCtx(remoteAddr, "", "", nil), nil,
		&grpc.UnaryServerInfo{FullMethod: "/raftmq.v1.Admin/Digest"},
		func(context.Context, any) (any, error) { called = true; return nil, nil })
	if status.Code(err) != codes.Unauthenticated || called {
		t.Fatalf("unary without credentials: err %v, handler called %v", err, called)
	}
	err = a.StreamInterceptor()(nil, fakeStream{ctx: callCtx(remoteAddr, "joe", "pw-joe", nil)},
		&grpc.StreamServerInfo{FullMethod: "/raftmq.v1.Admin/Digest"},
		func(any, grpc.ServerStream) error { called = true; return nil })
	if status.Code(err) != codes.PermissionDenied || called {
		t.Fatalf("stream of a user without tags: err %v, handler called %v", err, called)
	}
	err = a.StreamInterceptor()(nil, fakeStream{ctx: callCtx(remoteAddr, "root", "pw-root", nil)},
		&grpc.StreamServerInfo{FullMethod: "/raftmq.v1.Admin/Digest"},
		func(any, grpc.ServerStream) error { called = true; return nil })
	if err != nil || !called {
		t.Fatalf("stream of an administrator: err %v, handler called %v", err, called)
	}
}

type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (f fakeStream) Context() context.Context { return f.ctx }

// TestAuth_OverMutualTLS serves the Admin service with the cluster's TLS
// and the checks in mode always, and calls it with an administrator's
// client certificate (no node name) and client.BasicCredentials, with a node's
// certificate, and with a certificate of another CA.
func TestAuth_OverMutualTLS(t *testing.T) {
	ca := testpki.New(t, "test CA")
	node := opstest.AuthNode()
	auth := NewAuth(AuthAlways, node)
	srv := grpc.NewServer(append(cluster.ServerOptions(clustertest.NodeTLS(t, ca, "n1")),
		grpc.ChainUnaryInterceptor(auth.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(auth.StreamInterceptor()))...)
	proto.RegisterAdminServer(srv, New(ops.New(ops.Deps{Node: node})))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	dial := func(sec *linksec.TLS, creds *client.BasicCredentials) proto.AdminClient {
		return dialAdmin(t, lis.Addr().String(), credentials.NewTLS(sec.ClientConfig()), creds)
	}
	ctx := opstest.Context(t)
	ops := clustertest.NodeTLS(t, ca, "ops")
	_, err = dial(ops, nil).Digest(ctx, &proto.DigestRequest{})
	wantCode(t, err, codes.Unauthenticated, "username")
	_, err = dial(ops, &client.BasicCredentials{Username: "joe", Password: "pw-joe"}).Digest(ctx, &proto.DigestRequest{})
	wantCode(t, err, codes.PermissionDenied, "joe")
	if _, err := dial(ops, &client.BasicCredentials{Username: "root", Password: "pw-root"}).Digest(ctx, &proto.DigestRequest{}); err != nil {
		t.Fatalf("administrator: %v", err)
	}
	if _, err := dial(clustertest.NodeTLS(t, ca, "n2"), nil).Digest(ctx, &proto.DigestRequest{}); err != nil {
		t.Fatalf("a member's certificate: %v", err)
	}
	other := testpki.New(t, "another CA")
	_, err = dial(clustertest.NodeTLS(t, other, "n2"), &client.BasicCredentials{Username: "root", Password: "pw-root"}).Digest(ctx, &proto.DigestRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a certificate of another CA: %v, want the handshake to fail", err)
	}
}

func TestParseAuthMode(t *testing.T) {
	for s, want := range map[string]AuthMode{"auto": AuthAuto, "always": AuthAlways, "never": AuthNever} {
		if got, err := ParseAuthMode(s); err != nil || got != want || got.String() != s {
			t.Errorf("%q: %v %v", s, got, err)
		}
	}
	if _, err := ParseAuthMode("sometimes"); err == nil {
		t.Error("sometimes accepted")
	}
}

// startAuthNode is startNode with the checks of mode on the server; its
// client sends creds (nil: none).
func startAuthNode(t *testing.T, node *opstest.Node, mode AuthMode, creds *client.BasicCredentials) *testNode {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pool := ops.NewPeerPool()
	t.Cleanup(func() { _ = pool.Close() })
	auth := NewAuth(mode, node)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(auth.UnaryInterceptor()))
	proto.RegisterAdminServer(srv, New(ops.New(ops.Deps{Node: node, Peers: pool})))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	addr := lis.Addr().String()
	return &testNode{node: node, addr: addr, client: dialAdmin(t, addr, insecure.NewCredentials(), creds)}
}

// TestAuth_CallerCredentialsFollowForwardedCalls: a follower forwarding a
// consistent read to the leader passes the caller's credentials on, so a
// leader that asks for them (no node certificates here) serves it.
func TestAuth_CallerCredentialsFollowForwardedCalls(t *testing.T) {
	leader := opstest.AuthNode()
	leader.State.QueueList = []*proto.QueueInfo{{Vhost: "/", Name: "on-leader"}}
	follower := opstest.AuthNode()
	follower.ID = "n2"
	follower.LeaderID = "n1"
	l := startAuthNode(t, leader, AuthAlways, nil)
	f := startAuthNode(t, follower, AuthAlways, &client.BasicCredentials{Username: "watcher", Password: "pw-watcher"})
	setMembers(l, f)
	qs, err := f.client.ListQueues(opstest.Context(t), &proto.ListQueuesRequest{Consistent: true})
	if err != nil || len(qs.GetQueues()) != 1 || qs.GetQueues()[0].GetName() != "on-leader" {
		t.Fatalf("consistent read through the follower: %v %v", qs, err)
	}
	// The follower checks the caller first: monitoring may not list users.
	_, err = f.client.ListUsers(opstest.Context(t), &proto.ListRequest{Consistent: true})
	wantCode(t, err, codes.PermissionDenied, "watcher")
}

// dialAdmin is an Admin client of addr over transport, sending creds with
// every call (nil: none).
func dialAdmin(t *testing.T, addr string, transport credentials.TransportCredentials, creds *client.BasicCredentials) proto.AdminClient {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(transport)}
	if creds != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(*creds))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return proto.NewAdminClient(cc)
}
