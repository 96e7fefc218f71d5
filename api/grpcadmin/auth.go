package grpcadmin

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/api/client"
	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/cluster/linksec"
)

// AuthMode says when the Admin service asks for a user's credentials.
type AuthMode int

const (
	// AuthAuto lets through other nodes of the cluster (identified by
	// their certificates), callers that present the node's local admin
	// secret (the file in its data dir only the node's OS user can read,
	// as rabbitmqctl presents the Erlang cookie), and administrators with
	// their passwords. A caller's address proves nothing: every user and
	// container that shares the host's loopback would be trusted.
	AuthAuto AuthMode = iota
	// AuthAlways asks every caller except other nodes of the cluster for
	// a user's credentials; the local admin secret is not taken.
	AuthAlways
	// AuthNever asks nobody (the service is as open as its listener).
	AuthNever
	// AuthLoopback is AuthAuto that also trusts any caller connecting from
	// a loopback address, whoever runs it: the behaviour of raftmq before
	// the local admin secret, for a host where every local user and
	// program is trusted.
	AuthLoopback
)

// ParseAuthMode reads auto, always, never or loopback.
func ParseAuthMode(s string) (AuthMode, error) {
	switch s {
	case "auto", "":
		return AuthAuto, nil
	case "always":
		return AuthAlways, nil
	case "never":
		return AuthNever, nil
	case "loopback":
		return AuthLoopback, nil
	}
	return 0, fmt.Errorf("admin auth must be auto, always, never or loopback, not %q", s)
}

func (m AuthMode) String() string {
	switch m {
	case AuthAlways:
		return "always"
	case AuthNever:
		return "never"
	case AuthLoopback:
		return "loopback"
	}
	return "auto"
}

// TakesSecret reports whether the mode accepts the local admin secret.
func (m AuthMode) TakesSecret() bool { return m == AuthAuto || m == AuthLoopback }

// adminPrefix is the full method prefix of the Admin service; other
// services on the server (the internal forwarding service authenticates
// its callers by their node certificates itself) are not checked here.
const adminPrefix = "/raftmq.v1.Admin/"

// monitoringMethods are the Admin methods a user tagged monitoring may call:
// reads of the cluster, queues, exchanges, bindings, consumers,
// connections, policies and vhosts, as RabbitMQ's monitoring tag allows.
// Users and permissions, and every write, need administrator.
var monitoringMethods = map[string]bool{
	"ClusterStatus":   true,
	"ListGroups":      true,
	"ListQueues":      true,
	"GetQueue":        true,
	"ListExchanges":   true,
	"ListBindings":    true,
	"ListConsumers":   true,
	"ListConnections": true,
	"ListPolicies":    true,
	"ListVhosts":      true,
	"ListVhostLimits": true,
	"Digest":          true,
}

// Auth checks who calls the Admin service. Callers are let through when
//   - the mode is never;
//   - the caller presented a certificate verified by the gRPC server's TLS
//     (the cluster CA) that names a member of the cluster: another node,
//     forwarding a call or gathering connections;
//   - the mode is loopback and the caller's address is loopback;
//   - the mode is auto or loopback and the call carries the local admin
//     secret (SetLocalSecret); a wrong secret is Unauthenticated;
//   - otherwise the call carries the username and password of a user
//     tagged administrator (monitoring suffices for the reads listed in
//     monitoringMethods). A missing or wrong password is Unauthenticated; a
//     user without the tag is PermissionDenied. Beyond loopback those
//     credentials are taken only over TLS (a password must not cross the
//     network in clear) unless AllowPlaintext was called; so is the
//     secret.
type Auth struct {
	mode      AuthMode
	plaintext bool
	secret    []byte
	node      atomic.Pointer[ops.Node]
}

// NewAuth returns the checks of mode against node's users and members.
// node may be nil when the gRPC server must exist before the node does:
// SetNode gives it later, and calls before that are Unavailable.
func NewAuth(mode AuthMode, node ops.Node) *Auth {
	a := &Auth{mode: mode}
	if node != nil {
		a.SetNode(node)
	}
	return a
}

// AllowPlaintext lets callers beyond loopback send their credentials over
// a connection without TLS (a cluster without --cluster-tls-* on a network
// the operator trusts, such as the compose example's private one).
func (a *Auth) AllowPlaintext() *Auth {
	a.plaintext = true
	return a
}

// SetLocalSecret sets the local admin secret callers may present instead
// of a user's credentials (modes auto and loopback; see LocalSecret).
// Without it no secret is taken.
func (a *Auth) SetLocalSecret(secret []byte) *Auth {
	a.secret = slices.Clone(secret)
	return a
}

// SetNode sets the node whose users and members the checks use.
func (a *Auth) SetNode(n ops.Node) { a.node.Store(&n) }

// Mode is the mode the checks apply.
func (a *Auth) Mode() AuthMode { return a.mode }

// UnaryInterceptor checks unary calls.
func (a *Auth) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := a.Check(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
}

// StreamInterceptor checks streaming calls.
func (a *Auth) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if err := a.Check(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return h(srv, ss)
	}
}

// Check decides one call of fullMethod (nil: go ahead).
func (a *Auth) Check(ctx context.Context, fullMethod string) error {
	method, ok := strings.CutPrefix(fullMethod, adminPrefix)
	if !ok || a.mode == AuthNever {
		return nil
	}
	np := a.node.Load()
	if np == nil {
		return status.Error(codes.Unavailable, "the node is starting")
	}
	node := *np
	if fromMember(ctx, node) {
		return nil
	}
	loopback := fromLoopback(ctx)
	if a.mode == AuthLoopback && loopback {
		return nil
	}
	if !loopback && !a.plaintext && !overTLS(ctx) {
		return status.Error(codes.Unauthenticated, "the admin API takes credentials from beyond loopback over TLS only: configure --cluster-tls-cert, --cluster-tls-key and --cluster-tls-ca, or allow plain connections with --admin-plaintext")
	}
	user, password, ok := credentialsOf(ctx)
	if given, has := secretOf(ctx); has && a.mode.TakesSecret() && len(a.secret) > 0 {
		if subtle.ConstantTimeCompare([]byte(given), a.secret) == 1 {
			return nil
		}
		// A stale secret file beside a user's password must not lock
		// the user out: the password decides then.
		if !ok {
			return status.Error(codes.Unauthenticated, "wrong admin secret: it is not the one in this node's data dir (raftmqctl --data-dir or --secret-file)")
		}
	}
	if !ok {
		if a.mode.TakesSecret() {
			return status.Error(codes.Unauthenticated, "the admin API needs the node's admin secret (raftmqctl run by the node's OS user reads it from the data dir: --data-dir or --secret-file) or the username and password of an administrator")
		}
		return status.Error(codes.Unauthenticated, "the admin API needs the username and password of an administrator (--admin-auth always)")
	}
	login, ok := ops.Authenticate(node, user, password)
	if !ok {
		return status.Error(codes.Unauthenticated, "invalid username or password")
	}
	if slices.Contains(login.Tags, "administrator") || (monitoringMethods[method] && slices.Contains(login.Tags, "monitoring")) {
		return nil
	}
	if monitoringMethods[method] {
		return status.Errorf(codes.PermissionDenied, "user %q is tagged neither administrator nor monitoring", user)
	}
	return status.Errorf(codes.PermissionDenied, "user %q is not tagged administrator", user)
}

// fromMember reports whether the caller's verified certificate names a
// member of the cluster.
func fromMember(ctx context.Context, node ops.Node) bool {
	c := linksec.PeerCertificate(ctx)
	if c == nil {
		return false
	}
	names := linksec.CertNames(c)
	for _, m := range node.Members() {
		if slices.Contains(names, m.GetId()) {
			return true
		}
	}
	return false
}

// fromLoopback reports whether the call's peer address is a loopback IP.
func fromLoopback(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return false
	}
	host, _, err := net.SplitHostPort(p.Addr.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// overTLS reports whether the call came over a TLS connection.
func overTLS(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	_, isTLS := p.AuthInfo.(credentials.TLSInfo)
	return isTLS
}

// secretOf reads the call's local admin secret.
func secretOf(ctx context.Context) (string, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(client.SecretKey)
	if len(v) == 0 {
		return "", false
	}
	return v[0], true
}

// credentialsOf reads the call's basic credentials.
func credentialsOf(ctx context.Context) (user, password string, ok bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get(client.AuthorizationKey) {
		if user, password, ok = client.ParseBasic(v); ok {
			return user, password, true
		}
	}
	return "", "", false
}
