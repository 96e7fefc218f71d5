package mgmt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/raftmq/raftmq/api/mgmt/console"
	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

var consoleHandler = console.Handler()

// Options configure New.
type Options struct {
	// Ops are the node's operations (required): every write of the
	// management API is one of them.
	Ops *ops.Service
	// ClusterName is reported by /api/overview and /api/cluster-name
	// (default "raftmq").
	ClusterName string
	// Addr is the management listener's address, reported in
	// /api/overview's listeners.
	Addr string
	// Logger defaults to the admin service's.
	Logger *slog.Logger
	// MaxBodyBytes bounds a request body (default DefaultMaxBodyBytes).
	MaxBodyBytes int64
}

// DefaultMaxBodyBytes bounds a request body by default: a definitions
// file or a published message. The admin API's ImportDefinitions takes
// definitions as large.
const DefaultMaxBodyBytes = 64 << 20

// Server serves RabbitMQ's management HTTP API (the routes and JSON
// shapes of RabbitMQ 3.10's rabbitmq_management plugin that tools use) over
// one node. Reads come from the node's applied state; writes are the
// node's operations, so they go through the log from any node.
type Server struct {
	ops     *ops.Service
	node    ops.Node
	log     *slog.Logger
	cluster string
	addr    string
	maxBody int64
	rates   rates
	mux     *http.ServeMux
}

// New returns the management API handler.
func New(o Options) *Server {
	m := &Server{ops: o.Ops, node: o.Ops.Node(), log: o.Logger, cluster: o.ClusterName, addr: o.Addr,
		maxBody: o.MaxBodyBytes, rates: rates{now: time.Now}}
	if m.log == nil {
		m.log = o.Ops.Logger()
	}
	m.log = m.log.With("component", "management")
	if m.cluster == "" {
		m.cluster = "raftmq"
	}
	if m.maxBody <= 0 {
		m.maxBody = DefaultMaxBodyBytes
	}
	m.mux = m.routes()
	return m
}

// ---- errors ----

// httpError is a response in RabbitMQ's error shape.
type httpError struct {
	status int
	err    string
	reason string
}

func (e *httpError) Error() string { return e.reason }

func notFound() *httpError {
	return &httpError{http.StatusNotFound, "Object Not Found", "Not Found"}
}

func badRequest(format string, a ...any) *httpError {
	return &httpError{http.StatusBadRequest, "bad_request", fmt.Sprintf(format, a...)}
}

func notAuthorised(reason string) *httpError {
	return &httpError{http.StatusUnauthorized, "not_authorized", reason}
}

func methodNotAllowed() *httpError {
	return &httpError{http.StatusMethodNotAllowed, "Method Not Allowed", "Method Not Allowed"}
}

// fromError maps an operation's error to RabbitMQ's HTTP answer: a
// missing object is 404, a refusal (inequivalent arguments, a locked or
// used queue, a reserved name) is 400 with the AMQP reply text, as
// RabbitMQ's management plugin answers them.
func fromError(err error) *httpError {
	var he *httpError
	if errors.As(err, &he) {
		return he
	}
	var e *ops.Error
	if !errors.As(err, &e) {
		return &httpError{http.StatusInternalServerError, "internal_server_error", err.Error()}
	}
	switch e.Kind {
	case ops.NotFound:
		return notFound()
	case ops.Invalid, ops.Precondition, ops.Exists, ops.Unknown:
		return badRequest("%s", e.Detail())
	case ops.Denied:
		if e.Code == replycode.AccessRefused {
			return badRequest("%s", e.Detail())
		}
		return notAuthorised(e.Detail())
	case ops.Unavailable, ops.Timeout:
		return &httpError{http.StatusServiceUnavailable, "unavailable", e.Error()}
	}
	return &httpError{http.StatusInternalServerError, "internal_server_error", e.Error()}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e *httpError) {
	if e.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Basic realm="RabbitMQ Management"`)
	}
	writeJSON(w, e.status, map[string]string{"error": e.err, "reason": e.reason})
}

// ---- users and their rights ----

// mgmtUser is the authenticated caller.
type mgmtUser struct {
	name  string
	tags  []string
	perms map[string]*proto.PermissionInfo // by vhost
}

func (u *mgmtUser) has(tag string) bool { return slices.Contains(u.tags, tag) }
func (u *mgmtUser) admin() bool         { return u.has("administrator") }

// monitor: monitoring and administrator users see every vhost, connection
// and node.
func (u *mgmtUser) monitor() bool { return u.admin() || u.has("monitoring") }

// policymaker: policymaker and administrator users manage policies in the
// vhosts they can access.
func (u *mgmtUser) policymaker() bool { return u.admin() || u.has("policymaker") }

// managementTags are the tags that open the management API at all.
var managementTags = []string{"management", "policymaker", "monitoring", "administrator"}

// seesVhost: a vhost's objects are visible to monitors, and to others
// where they have permissions.
func (u *mgmtUser) seesVhost(v string) bool {
	_, ok := u.perms[v]
	return ok || u.monitor()
}

// access kinds of RabbitMQ's permissions.
const (
	permConfigure = iota
	permWrite
	permRead
)

// may reports whether the user's permissions in vhost allow kind on the
// resource name, as an AMQP client of that user would be checked: the
// pattern is matched unanchored, an empty one matches nothing, and the
// default exchange goes by the name amq.default.
func (u *mgmtUser) may(vhost string, kind int, resource, name string) *httpError {
	p, ok := u.perms[vhost]
	if !ok {
		return notAuthorised(fmt.Sprintf("access to vhost '%s' refused for user '%s'", vhost, u.name))
	}
	if resource == "exchange" && name == "" {
		name = "amq.default"
	}
	pat := [3]string{p.GetConfigure(), p.GetWrite(), p.GetRead()}[kind]
	if pat != "" {
		if re, err := regexp.Compile(pat); err == nil && re.MatchString(name) {
			return nil
		}
	}
	return notAuthorised(fmt.Sprintf("access to %s '%s' in vhost '%s' refused for user '%s'", resource, name, vhost, u.name))
}

// authenticate checks the request's basic credentials against the users
// in the applied state (the check AMQP logins use), with RabbitMQ's rules:
// guest logs in from loopback only, and only users with a management tag
// get in.
func (m *Server) authenticate(r *http.Request) (*mgmtUser, *httpError) {
	name, password, ok := r.BasicAuth()
	if !ok {
		return nil, notAuthorised("Login failed")
	}
	login, ok := ops.Authenticate(m.node, name, password)
	if !ok {
		return nil, notAuthorised("Login failed")
	}
	u := &mgmtUser{name: name, tags: login.Tags, perms: login.Perms}
	if name == "guest" && !loopbackRemote(r.RemoteAddr) {
		// RabbitMQ's default loopback_users.
		return nil, notAuthorised("User can only log in via localhost")
	}
	if !slices.ContainsFunc(u.tags, func(t string) bool { return slices.Contains(managementTags, t) }) {
		return nil, notAuthorised("Not management user")
	}
	return u, nil
}

func loopbackRemote(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ---- request plumbing ----

// req is one request being served.
type req struct {
	m    *Server
	w    http.ResponseWriter
	r    *http.Request
	ctx  context.Context
	user *mgmtUser
	// msgRange and lenRange are the samples asked for with
	// msg_rates_age/_incr and lengths_age/_incr (nil: none).
	msgRange, lenRange *rng
}

// userKey carries the authenticated caller from ServeHTTP to the route.
type userKey struct{}

// ServeHTTP implements http.Handler: the console's files without
// credentials, the API (routes) with them.
func (m *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Requested-With") == "XMLHttpRequest" {
		w = noChallenge{w}
	}
	path := r.URL.EscapedPath()
	if !strings.HasPrefix(path, "/api/") && path != "/api" {
		// The web console is served without credentials, as RabbitMQ's
		// is: the page logs in to the API with the user's.
		consoleHandler.ServeHTTP(w, r)
		return
	}
	user, herr := m.authenticate(r)
	if herr != nil {
		writeError(w, herr)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, m.maxBody)
	m.rates.observe(m.sample)
	m.mux.ServeHTTP(w, routable(r.WithContext(context.WithValue(r.Context(), userKey{}, user))))
}

// routable is r with its path as the mux matches it. RabbitMQ's API takes
// a trailing slash (/api/queues/ is /api/queues), which is dropped here.
// And two segments Go's ServeMux cannot take as a {wildcard}: "%2F", the
// default vhost, which it mistakes for a trailing slash, and an empty one
// (the default exchange's name), which it cleans away with a redirect. A
// segment whose value is "" or "/", followed by any number of NULs, gets
// one NUL more (q.arg takes it off again): a one-to-one mapping, so no
// name is mistaken for another, and no literal of a route is touched.
func routable(r *http.Request) *http.Request {
	escaped := r.URL.EscapedPath()
	path := escaped
	if len(path) > len("/api/") {
		path = strings.TrimSuffix(path, "/")
	}
	segs := strings.Split(path, "/")
	for i := 1; i < len(segs); i++ {
		if u, err := url.PathUnescape(segs[i]); err == nil && nulPadded(u) {
			segs[i] += "%00"
		}
	}
	path = strings.Join(segs, "/")
	if path == escaped {
		return r
	}
	u := *r.URL
	u.RawPath = path
	u.Path, _ = url.PathUnescape(path)
	r.URL = &u
	return r
}

// nulPadded reports whether a segment's value is "" or "/", followed by
// any number of NULs: the values routable pads.
func nulPadded(v string) bool {
	return strings.Trim(strings.TrimPrefix(v, "/"), "\x00") == ""
}

// serve is a route's handler: fn answers, or returns the error to answer
// in RabbitMQ's shape.
func (m *Server) serve(fn func(*req) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, _ := r.Context().Value(userKey{}).(*mgmtUser)
		q := &req{m: m, w: w, r: r, ctx: r.Context(), user: user}
		err := q.parseRanges()
		if err == nil {
			err = fn(q)
		}
		if err != nil {
			he := fromError(err)
			if he.status >= 500 {
				m.log.Warn("management request failed", "method", r.Method, "path", r.URL.EscapedPath(), "err", he.reason)
			}
			writeError(w, he)
		}
	})
}

// noChallenge answers a script's request (the web console's, marked as
// such with X-Requested-With): its 401 has no WWW-Authenticate challenge,
// which would make the browser ask for credentials of its own over the
// console's login form (headless, stall the request). Other clients get
// the challenge on every 401, as from RabbitMQ.
type noChallenge struct{ http.ResponseWriter }

func (w noChallenge) WriteHeader(code int) {
	if code == http.StatusUnauthorized {
		w.Header().Del("WWW-Authenticate")
	}
	w.ResponseWriter.WriteHeader(code)
}

// body decodes the request's JSON object; an empty body is an empty
// object. Numbers stay json.Number so integers keep their exact value.
func (q *req) body() (map[string]any, error) {
	raw, err := io.ReadAll(q.r.Body)
	if err != nil {
		return nil, badRequest("reading the body: %v", err)
	}
	out := map[string]any{}
	if len(strings.TrimSpace(string(raw))) == 0 {
		return out, nil
	}
	d := json.NewDecoder(strings.NewReader(string(raw)))
	d.UseNumber()
	if err := d.Decode(&out); err != nil {
		return nil, badRequest("failed to decode json: %v", err)
	}
	return out, nil
}

func (q *req) ok(v any)   { writeJSON(q.w, http.StatusOK, v) }
func (q *req) noContent() { q.w.WriteHeader(http.StatusNoContent) }
func (q *req) created(existed bool) {
	if existed {
		q.noContent()
		return
	}
	q.w.WriteHeader(http.StatusCreated)
}

func (q *req) queryBool(name string) bool {
	v := q.r.URL.Query().Get(name)
	return v == "true" || v == "1"
}

// ---- loose JSON fields: rabbitmqadmin sends booleans and numbers as
// strings ("durable": "true", "count": "1"), and RabbitMQ takes both. ----

func fieldBool(b map[string]any, key string, def bool) (bool, error) {
	v, ok := b[key]
	if !ok || v == nil {
		return def, nil
	}
	switch x := v.(type) {
	case bool:
		return x, nil
	case string:
		switch x {
		case "true":
			return true, nil
		case "false", "":
			return false, nil
		}
	}
	return false, badRequest("%s must be a boolean, got %v", key, v)
}

func fieldInt(b map[string]any, key string, def int64) (int64, error) {
	v, ok := b[key]
	if !ok || v == nil {
		return def, nil
	}
	var s string
	switch x := v.(type) {
	case json.Number:
		s = x.String()
	case string:
		s = x
	default:
		return 0, badRequest("%s must be a number, got %v", key, v)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, badRequest("%s must be an integer, got %v", key, v)
	}
	return n, nil
}

func fieldString(b map[string]any, key, def string) (string, error) {
	v, ok := b[key]
	if !ok || v == nil {
		return def, nil
	}
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	}
	return "", badRequest("%s must be a string, got %v", key, v)
}

// fieldTable reads an arguments object; rabbitmqadmin may send it as a
// JSON string.
func fieldTable(b map[string]any, key string) (*proto.Table, error) {
	v, ok := b[key]
	if !ok || v == nil {
		return nil, nil
	}
	if s, ok := v.(string); ok {
		if strings.TrimSpace(s) == "" {
			return nil, nil
		}
		d := json.NewDecoder(strings.NewReader(s))
		d.UseNumber()
		var x any
		if err := d.Decode(&x); err != nil {
			return nil, badRequest("%s: %v", key, err)
		}
		v = x
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, badRequest("%s must be an object", key)
	}
	return tableFromJSON(obj)
}

// ---- AMQP field tables as JSON ----

// tableFromJSON converts a JSON object to a field table the way RabbitMQ's
// management plugin does: integers become signed 64-bit, other numbers
// doubles, strings long strings, objects tables and arrays arrays. Keys are
// sorted so that the same object always gives the same table.
func tableFromJSON(obj map[string]any) (*proto.Table, error) {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	t := &proto.Table{Fields: make([]*proto.Field, 0, len(keys))}
	for _, k := range keys {
		v, err := valueFromJSON(obj[k])
		if err != nil {
			return nil, badRequest("argument %q: %v", k, err)
		}
		t.Fields = append(t.Fields, &proto.Field{Key: k, Value: v})
	}
	return t, nil
}

func valueFromJSON(v any) (*proto.Value, error) {
	switch x := v.(type) {
	case nil:
		return &proto.Value{Kind: &proto.Value_Void{Void: true}}, nil
	case bool:
		return &proto.Value{Kind: &proto.Value_Bool{Bool: x}}, nil
	case string:
		return &proto.Value{Kind: &proto.Value_LongString{LongString: []byte(x)}}, nil
	case json.Number:
		if n, err := strconv.ParseInt(x.String(), 10, 64); err == nil {
			return &proto.Value{Kind: &proto.Value_Int64{Int64: n}}, nil
		}
		f, err := x.Float64()
		if err != nil {
			return nil, err
		}
		return &proto.Value{Kind: &proto.Value_Float64{Float64: f}}, nil
	case float64:
		if x == float64(int64(x)) {
			return &proto.Value{Kind: &proto.Value_Int64{Int64: int64(x)}}, nil
		}
		return &proto.Value{Kind: &proto.Value_Float64{Float64: x}}, nil
	case map[string]any:
		t, err := tableFromJSON(x)
		if err != nil {
			return nil, err
		}
		return &proto.Value{Kind: &proto.Value_Table{Table: t}}, nil
	case []any:
		a := &proto.Array{}
		for _, e := range x {
			pv, err := valueFromJSON(e)
			if err != nil {
				return nil, err
			}
			a.Values = append(a.Values, pv)
		}
		return &proto.Value{Kind: &proto.Value_Array{Array: a}}, nil
	}
	return nil, fmt.Errorf("unsupported JSON value %T", v)
}
