// Command raftmqctl administers a raftmq cluster through a node's gRPC admin
// API. Its verbs mirror rabbitmqctl's:
//
//	raftmqctl [--node host:port] [-p vhost] [--formatter json|table] [-q] [--no-table-headers]
//	          [--consistent] [-t seconds] VERB [ARGS...]
//
// raftmqctl --help lists the verbs; raftmqctl help VERB (or VERB --help)
// describes one, with the columns a list verb accepts.
//
// Beyond loopback a node asks for an administrator's --username and
// --password (or RAFTMQ_USERNAME, RAFTMQ_PASSWORD), over TLS unless the node
// allows them in clear: a node with cluster TLS needs --tls-ca, --tls-cert
// and --tls-key (a client certificate of the cluster CA); a node with the
// cluster secret takes --tls-ca alone, the cluster-ca.pem in its data dir.
//
// Exit codes are rabbitmqctl's: 0 success, 1 the call failed, 64 usage
// error (EX_USAGE), 69 the node cannot be reached or is not ready.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
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
	description string
	local       bool

	// managementURL is the node's management HTTP API, for the
	// definitions verbs (definitions.go).
	managementURL string

	delayed delayedOptions // delayed.go

	sec dialSecurity
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
	fs.BoolVar(&o.consistent, "consistent", false, "read from the leader")
	o.timeout = 30 * time.Second
	fs.Var(timeoutFlag{&o.timeout}, "timeout", "deadline of the call: seconds, as rabbitmqctl, or a duration such as 500ms")
	fs.Var(timeoutFlag{&o.timeout}, "t", "shorthand for --timeout")
	fs.IntVar(&o.priority, "priority", 0, "policy priority")
	fs.StringVar(&o.applyTo, "apply-to", "all", "what a policy applies to: queues, exchanges or all")
	fs.BoolVar(&o.ifUnused, "if-unused", false, "delete_queue: only if the queue has no consumers")
	fs.BoolVar(&o.ifEmpty, "if-empty", false, "delete_queue: only if the queue is empty")
	fs.StringVar(&o.description, "description", "", "add_vhost: description")
	fs.BoolVar(&o.local, "local", false, "list_connections: only the node's own connections")
	fs.StringVar(&o.managementURL, "management-url", envOr("RAFTMQ_MANAGEMENT_URL", defaultManagementURL), "management HTTP API of a node, for export_definitions and import_definitions (env RAFTMQ_MANAGEMENT_URL)")
	delayedFlags(fs, &o.delayed)
	fs.StringVar(&o.sec.Username, "username", os.Getenv("RAFTMQ_USERNAME"), "user for the admin API, tagged administrator (env RAFTMQ_USERNAME)")
	fs.StringVar(&o.sec.Password, "password", os.Getenv("RAFTMQ_PASSWORD"), "password of --username (env RAFTMQ_PASSWORD, which ps does not show)")
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
		fmt.Fprintf(stderr, "raftmqctl: unknown verb %q\n", name)
		printUsage(stderr)
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
	return exitFailed
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
		fmt.Fprintf(stderr, "raftmqctl: unknown verb %q\n", args[0])
		printUsage(stderr)
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
	fmt.Fprintln(w, "  -t, --timeout seconds      deadline of the call (default 30)")
	fmt.Fprintln(w, "  --consistent               read from the leader")
	fmt.Fprintln(w, "  --username u --password p  an administrator (env RAFTMQ_USERNAME, RAFTMQ_PASSWORD)")
	fmt.Fprintln(w, "  --tls-ca ca.pem --tls-cert c.pem --tls-key c.key")
	fmt.Fprintln(w, "  --management-url url       a node's management HTTP API, for the definitions verbs")
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
