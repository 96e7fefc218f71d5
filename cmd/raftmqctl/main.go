// Command raftmqctl administers a raftmq cluster through a node's gRPC admin
// API. Its verbs mirror rabbitmqctl's:
//
//	raftmqctl [--node host:port] [-p vhost] [--formatter json|table] [-q] [-s] [--no-table-headers]
//	          [--consistent] [-t seconds] [--data-dir dir | --secret-file file] VERB [ARGS...]
//
// raftmqctl --help lists the verbs; raftmqctl help VERB (or VERB --help)
// describes one, with the columns a list verb accepts.
//
// On the node's host, raftmqctl run by the node's OS user proves itself
// with the admin secret in the node's data dir (--data-dir, default
// raftmq's; or --secret-file), as rabbitmqctl does with the Erlang cookie;
// anyone else needs an administrator's credentials, from loopback too.
//
// Beyond loopback a node asks for an administrator's --username and
// --password (or RAFTMQ_USERNAME, RAFTMQ_PASSWORD), over TLS unless the node
// allows them in clear: a node with cluster TLS needs --tls-ca, --tls-cert
// and --tls-key (a client certificate of the cluster CA); a node with the
// cluster secret takes --tls-ca alone, the cluster-ca.pem in its data dir.
//
// Exit codes are rabbitmqctl's: 0 success, 1 the call failed, 64 usage
// error (EX_USAGE), 65 a vhost that does not exist (EX_DATAERR), 67 a user
// that does not exist (EX_NOUSER), 69 the node cannot be reached or is not
// ready, or a check failed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/api/client"
	"github.com/raftmq/raftmq/proto"
)

// Exit codes.
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 64 // EX_USAGE, as rabbitmqctl
	exitDataErr     = 65 // EX_DATAERR: rabbitmqctl's for a vhost that does not exist
	exitNoUser      = 67 // EX_NOUSER: rabbitmqctl's for a user that does not exist
	exitUnavailable = 69 // EX_UNAVAILABLE
)

// defaultNode is the gRPC address used without --node or RAFTMQ_NODE.
const defaultNode = "localhost:5680"

func main() {
	os.Exit(runWith(os.Args[1:], os.Stdout, os.Stderr, dialNode))
}

// dialSecurity is how raftmqctl authenticates to a node: a user's
// credentials and TLS files (all optional).
type dialSecurity = client.Security

// dialNode returns an Admin client of the node at addr. The connection is
// established by the first call.
func dialNode(addr string, sec dialSecurity) (proto.AdminClient, error) {
	return client.Dial(addr, sec)
}

// options are the global and verb flags.
type options struct {
	node       string
	vhost      string
	json       bool
	consistent bool
	timeout    time.Duration
	// quiet drops the informational lines ("Listing queues ...") that
	// rabbitmqctl prints before a result.
	quiet bool
	// noHeaders drops the header row of tables, for scripts.
	noHeaders bool

	priority    int
	applyTo     string
	ifUnused    bool
	ifEmpty     bool
	errorsOnly  bool
	description string
	local       bool
	global      bool

	// managementURL is the node's management HTTP API, for the
	// definitions verbs (definitions.go).
	managementURL string

	delayed delayedOptions // delayed.go

	sec dialSecurity
	// dataDir and secretFile say where the node's local admin secret is
	// (secretFile wins).
	dataDir, secretFile string
}

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// newFlagSet declares every flag; verbs read the ones they use.
func newFlagSet(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("raftmqctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	node := os.Getenv("RAFTMQ_NODE")
	if node == "" {
		node = defaultNode
	}
	fs.StringVar(&o.node, "node", node, "gRPC address of a node (env RAFTMQ_NODE)")
	fs.StringVar(&o.node, "n", node, "shorthand for --node")
	fs.StringVar(&o.vhost, "vhost", "/", "virtual host")
	fs.StringVar(&o.vhost, "p", "/", "shorthand for --vhost")
	fs.BoolVar(&o.json, "json", false, "print one JSON document (same as --formatter json)")
	fs.Var(formatterFlag{&o.json}, "formatter", "output format: table or json")
	fs.BoolVar(&o.quiet, "quiet", false, "no informational lines")
	fs.BoolVar(&o.quiet, "q", false, "shorthand for --quiet")
	fs.BoolVar(&o.noHeaders, "no-table-headers", false, "tables without their header row")
	fs.Var(silentFlag{o}, "silent", "no informational lines and no table headers (rabbitmqctl's -s)")
	fs.Var(silentFlag{o}, "s", "shorthand for --silent")
	fs.BoolVar(&o.consistent, "consistent", false, "read from the leader")
	o.timeout = 30 * time.Second
	fs.Var(timeoutFlag{&o.timeout}, "timeout", "deadline of the call: seconds, as rabbitmqctl, or a duration such as 500ms")
	fs.Var(timeoutFlag{&o.timeout}, "t", "shorthand for --timeout")
	fs.IntVar(&o.priority, "priority", 0, "policy priority")
	fs.StringVar(&o.applyTo, "apply-to", "all", "what a policy applies to: queues, exchanges or all")
	fs.BoolVar(&o.ifUnused, "if-unused", false, "delete_queue: only if the queue has no consumers")
	fs.BoolVar(&o.ifEmpty, "if-empty", false, "delete_queue: only if the queue is empty")
	fs.BoolVar(&o.errorsOnly, "errors-only", false, "grow, shrink: only the queues whose group reported an error")
	fs.StringVar(&o.description, "description", "", "add_vhost: description")
	fs.BoolVar(&o.local, "local", false, "list_connections: only the node's own connections")
	fs.BoolVar(&o.global, "global", false, "list_vhost_limits: the limits of every vhost")
	fs.StringVar(&o.managementURL, "management-url", envOr("RAFTMQ_MANAGEMENT_URL", defaultManagementURL), "management HTTP API of a node whose admin API has no definitions calls (an older node), for export_definitions and import_definitions (env RAFTMQ_MANAGEMENT_URL)")
	delayedFlags(fs, &o.delayed)
	fs.StringVar(&o.sec.Username, "username", os.Getenv("RAFTMQ_USERNAME"), "user for the admin API, tagged administrator (env RAFTMQ_USERNAME)")
	fs.StringVar(&o.sec.Password, "password", os.Getenv("RAFTMQ_PASSWORD"), "password of --username (env RAFTMQ_PASSWORD, which ps does not show)")
	fs.StringVar(&o.dataDir, "data-dir", envOr("RAFTMQ_DATA_DIR", client.DefaultDataDir), "data dir of the node on this host, whose admin secret raftmqctl presents to a node on loopback (env RAFTMQ_DATA_DIR, as raftmq's)")
	fs.StringVar(&o.secretFile, "secret-file", os.Getenv("RAFTMQ_ADMIN_SECRET_FILE"), "file holding the node's admin secret, presented to the node whatever its address (env RAFTMQ_ADMIN_SECRET_FILE)")
	fs.StringVar(&o.sec.CAFile, "tls-ca", os.Getenv("RAFTMQ_TLS_CA"), "PEM certificate of the cluster CA (with the cluster secret: a node's <data-dir>/cluster-ca.pem): connect with TLS (env RAFTMQ_TLS_CA)")
	fs.StringVar(&o.sec.CertFile, "tls-cert", os.Getenv("RAFTMQ_TLS_CERT"), "PEM client certificate signed by the cluster CA (env RAFTMQ_TLS_CERT)")
	fs.StringVar(&o.sec.KeyFile, "tls-key", os.Getenv("RAFTMQ_TLS_KEY"), "PEM key of --tls-cert (env RAFTMQ_TLS_KEY)")
	return fs
}

// parseArgs parses flags wherever they appear and returns the positional
// arguments ("--" ends the flags).
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				// The positional arguments so far say whose help.
				return pos, errHelp
			}
			return nil, usagef("%v", err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// run is runWith for a dial that needs no security settings.
func run(args []string, stdout, stderr io.Writer, dial func(addr string) (proto.AdminClient, error)) int {
	return runWith(args, stdout, stderr, func(addr string, _ dialSecurity) (proto.AdminClient, error) { return dial(addr) })
}

// runWith is the whole command: it parses args, calls the node dialled with
// dial and returns the exit code.
func runWith(args []string, stdout, stderr io.Writer, dial func(addr string, sec dialSecurity) (proto.AdminClient, error)) int {
	var o options
	fs := newFlagSet(&o)
	pos, err := parseArgs(fs, args)
	if errors.Is(err, errHelp) {
		// --help or -h: the usage of the verb before it, else the
		// general usage.
		pos = append([]string{"help"}, pos...)
	} else if err != nil {
		fmt.Fprintf(stderr, "raftmqctl: %v\n", err)
		return exitUsage
	}
	if len(pos) == 0 {
		printUsage(stderr)
		return exitUsage
	}
	name, vargs := pos[0], pos[1:]
	if name == "help" {
		return help(vargs, stdout, stderr)
	}
	v, ok := verbs[name]
	if !ok {
		unknownVerb(stderr, name)
		return exitUsage
	}
	if len(vargs) < v.min || (v.max >= 0 && len(vargs) > v.max) {
		fmt.Fprintf(stderr, "raftmqctl: usage: raftmqctl %s %s\n", name, v.args)
		return exitUsage
	}
	if err := v.check(&o, vargs); err != nil {
		fmt.Fprintf(stderr, "raftmqctl: %v\n", err)
		return exitUsage
	}
	secretNote, err := o.loadSecret()
	if err != nil {
		fmt.Fprintf(stderr, "raftmqctl: %v\n", err)
		return exitUsage
	}
	client, err := dial(o.node, o.sec)
	if err != nil {
		fmt.Fprintf(stderr, "raftmqctl: cannot reach %s: %v\n", o.node, err)
		return exitUnavailable
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	err = v.run(&call{ctx: ctx, c: client, o: &o, args: vargs, out: stdout, info: stderr})
	if err == nil {
		return exitOK
	}
	if re, ok := notFoundError(name, &o, vargs, err); ok {
		err = re
	}
	var re rabbitError
	if errors.As(err, &re) {
		if re.text != "" {
			fmt.Fprintln(stderr, re.text)
		}
		return re.code
	}
	var ee exitError
	if errors.As(err, &ee) {
		fmt.Fprintf(stderr, "raftmqctl: %v\n", ee.msg)
		return ee.code
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "raftmqctl: %v\n", err)
		return exitUsage
	}
	if unreachable(err) {
		fmt.Fprintf(stderr, "raftmqctl: cannot reach %s: %v\n", o.node, status.Convert(err).Message())
		return exitUnavailable
	}
	st := status.Convert(err)
	fmt.Fprintf(stderr, "Error: %s: %s\n", st.Code(), st.Message())
	if st.Code() == codes.Unauthenticated && secretNote != "" {
		fmt.Fprintf(stderr, "raftmqctl: %s\n", secretNote)
	}
	return exitFailed
}

// loadSecret sets o.sec.Secret from the node's admin secret file. An
// explicit --secret-file must be readable. The data dir's file is read
// only for a node on loopback (a node elsewhere has a secret of its own,
// and this one must not travel); when it is missing or unreadable the
// call goes without it, and note says why for the node's refusal.
func (o *options) loadSecret() (note string, err error) {
	if o.secretFile != "" {
		if o.sec.Secret, err = client.ReadSecret(o.secretFile); err != nil {
			return "", fmt.Errorf("--secret-file: %w", err)
		}
		return "", nil
	}
	if o.dataDir == "" || !loopbackNode(o.node) {
		return "", nil
	}
	path := filepath.Join(o.dataDir, client.SecretFileName)
	o.sec.Secret, err = client.ReadSecret(path)
	switch {
	case err == nil:
		return "", nil
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("no admin secret at %s: give the node's data dir (--data-dir, RAFTMQ_DATA_DIR) or an administrator's --username and --password", path), nil
	case errors.Is(err, fs.ErrPermission):
		return fmt.Sprintf("cannot read the admin secret %s: run raftmqctl as the node's OS user, or give an administrator's --username and --password", path), nil
	}
	return fmt.Sprintf("cannot read the admin secret: %v", err), nil
}

// loopbackNode reports whether addr (host:port) names this host's
// loopback.
func loopbackNode(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// unreachable reports whether err says the node could not be connected to
// (as opposed to the node answering that it cannot serve the call).
func unreachable(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return false
	}
	m := st.Message()
	return strings.Contains(m, "connection error") || strings.Contains(m, "name resolver") ||
		strings.Contains(m, "connection refused") || strings.Contains(m, "no such host")
}

// exitError ends a verb with its own exit code and message (ping and
// await_startup report an unready node as 69, not as a failed call).
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }

// rabbitError ends a verb as rabbitmqctl ends it: its text as printed,
// and its exit code.
type rabbitError struct {
	code int
	text string
}

func (e rabbitError) Error() string { return e.text }

// noSuchVhost is rabbitmqctl's answer for a vhost that does not exist,
// where it checks before acting (list_permissions, delete_vhost).
func noSuchVhost(vhost string) rabbitError {
	return rabbitError{exitDataErr, fmt.Sprintf("Virtual host '%s' does not exist", vhost)}
}

// notFoundError turns the node's refusal of a verb for a user or vhost that
// does not exist into rabbitmqctl's wording and exit code for that verb
// (RabbitMQ 3.10's rabbitmqctl words them differently from verb to verb).
func notFoundError(verbName string, o *options, args []string, err error) (rabbitError, bool) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.NotFound {
		return rabbitError{}, false
	}
	noUser := strings.Contains(st.Message(), "no user '")
	noVhost := strings.Contains(st.Message(), "no vhost '")
	switch {
	case noUser && (verbName == "delete_user" || verbName == "change_password" || verbName == "set_user_tags"):
		return rabbitError{exitNoUser, fmt.Sprintf("Error:\nUser %q does not exist", args[0])}, true
	case noUser && (verbName == "set_permissions" || verbName == "clear_permissions"):
		return rabbitError{exitNoUser, fmt.Sprintf("Error:\nUser %s does not exist", args[0])}, true
	case noVhost && verbName == "set_permissions":
		return rabbitError{exitUnavailable, fmt.Sprintf("Error:\nVirtual host %s does not exist", o.vhost)}, true
	case noVhost && verbName == "delete_vhost":
		return noSuchVhost(args[0]), true
	}
	return rabbitError{}, false
}

// errHelp is parseArgs' answer to --help or -h.
var errHelp = errors.New("help requested")

// formatterFlag is --formatter: json or table, the former what --json does.
type formatterFlag struct{ json *bool }

func (f formatterFlag) String() string {
	if f.json != nil && *f.json {
		return "json"
	}
	return "table"
}

func (f formatterFlag) Set(s string) error {
	switch s {
	case "json":
		*f.json = true
	case "table":
		*f.json = false
	default:
		return fmt.Errorf("must be json or table, not %q", s)
	}
	return nil
}

// silentFlag is --silent and -s: rabbitmqctl's -q and --no-table-headers
// at once.
type silentFlag struct{ o *options }

func (f silentFlag) IsBoolFlag() bool { return true }

func (f silentFlag) String() string {
	if f.o == nil {
		return "false"
	}
	return strconv.FormatBool(f.o.quiet && f.o.noHeaders)
}

func (f silentFlag) Set(s string) error {
	on, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	if on {
		f.o.quiet, f.o.noHeaders = true, true
	}
	return nil
}

// unknownVerb says a verb does not exist, as rabbitmqctl does, naming the
// closest verb when one is close, instead of the whole usage.
func unknownVerb(w io.Writer, name string) {
	fmt.Fprintf(w, "Command '%s' not found.\n", name)
	if s := closestVerb(name); s != "" {
		fmt.Fprintf(w, "Did you mean '%s'?\n", s)
	}
	fmt.Fprintln(w, "raftmqctl --help lists the verbs.")
}

// closestVerb is the verb nearest to name in edits, when that is at most a
// third of name's length (at least 1), or the only verb name begins; ""
// when none is close.
func closestVerb(name string) string {
	best, bestD := "", len(name)/3
	if bestD < 1 {
		bestD = 1
	}
	bestD++
	names := make([]string, 0, len(verbs))
	for n := range verbs {
		names = append(names, n)
	}
	sort.Strings(names)
	var prefixed []string
	for _, n := range names {
		if d := editDistance(name, n); d < bestD {
			best, bestD = n, d
		}
		if len(name) >= 3 && strings.HasPrefix(n, name) {
			prefixed = append(prefixed, n)
		}
	}
	if best == "" && len(prefixed) == 1 {
		return prefixed[0]
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// timeoutFlag is --timeout and -t: a number is seconds, as rabbitmqctl's
// -t, and a Go duration ("500ms", "2m") is taken as written.
type timeoutFlag struct{ d *time.Duration }

func (f timeoutFlag) String() string {
	if f.d == nil {
		return ""
	}
	return f.d.String()
}

func (f timeoutFlag) Set(s string) error {
	if secs, err := strconv.ParseFloat(s, 64); err == nil {
		if secs <= 0 {
			return fmt.Errorf("must be positive, not %s", s)
		}
		*f.d = time.Duration(secs * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is neither seconds nor a duration", s)
	}
	if d <= 0 {
		return fmt.Errorf("must be positive, not %s", s)
	}
	*f.d = d
	return nil
}

// help prints the general usage (no args) or one verb's, exit 0; an
// unknown verb is a usage error.
func help(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printUsage(stdout)
		return exitOK
	}
	v, ok := verbs[args[0]]
	if !ok {
		unknownVerb(stderr, args[0])
		return exitUsage
	}
	printVerbUsage(stdout, args[0], v)
	return exitOK
}

// printVerbUsage describes one verb and, for a list verb, its columns.
func printVerbUsage(w io.Writer, name string, v verb) {
	fmt.Fprintln(w, "usage: raftmqctl [global options] "+strings.TrimSpace(name+" "+v.args))
	if v.help != "" {
		fmt.Fprintln(w, "\n"+v.help)
	}
	if v.columns != nil {
		fmt.Fprintln(w, "\ncolumns (info items):")
		for _, c := range v.columns() {
			fmt.Fprintln(w, "  "+c)
		}
		if len(v.defaults) > 0 {
			fmt.Fprintln(w, "\nwithout columns: "+strings.Join(v.defaults, " "))
		}
	}
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: raftmqctl [global options] VERB [ARGS...]")
	fmt.Fprintln(w, "\nglobal options:")
	fmt.Fprintln(w, "  -n, --node host:port       gRPC address of a node (env RAFTMQ_NODE, default "+defaultNode+")")
	fmt.Fprintln(w, "  -p, --vhost vhost          virtual host (default /)")
	fmt.Fprintln(w, "  --formatter json|table     output format (--json: json)")
	fmt.Fprintln(w, "  -q, --quiet                no informational lines")
	fmt.Fprintln(w, "  --no-table-headers         tables without their header row")
	fmt.Fprintln(w, "  -s, --silent               -q and --no-table-headers")
	fmt.Fprintln(w, "  -t, --timeout seconds      deadline of the call (default 30)")
	fmt.Fprintln(w, "  --consistent               read from the leader")
	fmt.Fprintln(w, "  --data-dir dir             data dir of the node on this host: its admin secret is sent to a")
	fmt.Fprintln(w, "                             node on loopback (env RAFTMQ_DATA_DIR, default "+client.DefaultDataDir+")")
	fmt.Fprintln(w, "  --secret-file file         the node's admin secret, sent to any node (env RAFTMQ_ADMIN_SECRET_FILE)")
	fmt.Fprintln(w, "  --username u --password p  an administrator (env RAFTMQ_USERNAME, RAFTMQ_PASSWORD)")
	fmt.Fprintln(w, "  --tls-ca ca.pem --tls-cert c.pem --tls-key c.key")
	fmt.Fprintln(w, "  --management-url url       the definitions verbs' fallback for an older node: its management HTTP API")
	fmt.Fprintln(w, "  -h, --help                 this text; VERB --help or help VERB: the verb's")
	fmt.Fprintln(w, "\nverbs:")
	names := make([]string, 0, len(verbs))
	for n := range verbs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintln(w, "  "+strings.TrimSpace(n+" "+verbs[n].args))
	}
}
