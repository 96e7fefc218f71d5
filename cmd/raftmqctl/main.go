// Command raftmqctl administers a raftmq cluster through a node's gRPC admin
// API. Its verbs mirror rabbitmqctl's:
//
//	raftmqctl [--node host:port] [-p vhost] [--json] [--consistent] [--timeout d] VERB [ARGS...]
//
// Beyond loopback a node asks for an administrator's --username and
// --password (or RAFTMQ_USERNAME, RAFTMQ_PASSWORD), over TLS unless the node
// allows them in clear: a node with cluster TLS needs --tls-ca, --tls-cert
// and --tls-key (a client certificate of the cluster CA); a node with the
// cluster secret takes --tls-ca alone, the cluster-ca.pem in its data dir.
//
// Exit codes: 0 success, 1 the call failed, 2 usage error, 69 the node
// cannot be reached.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/api"
	"github.com/raftmq/raftmq/proto"
)

// Exit codes.
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitUnavailable = 69 // EX_UNAVAILABLE
)

// defaultNode is the gRPC address used without --node or RAFTMQ_NODE.
const defaultNode = "localhost:5680"

func main() {
	os.Exit(runWith(os.Args[1:], os.Stdout, os.Stderr, dialNode))
}

// dialSecurity is how raftmqctl authenticates to a node: a user's
// credentials and TLS files (all optional).
type dialSecurity struct {
	username, password     string
	tlsCA, tlsCert, tlsKey string
}

// dialNode returns an Admin client of the node at addr. The connection is
// established by the first call.
func dialNode(addr string, sec dialSecurity) (proto.AdminClient, error) {
	creds := insecure.NewCredentials()
	if sec.tlsCA != "" || sec.tlsCert != "" || sec.tlsKey != "" {
		c, err := api.ClientTLS(sec.tlsCA, sec.tlsCert, sec.tlsKey)
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(c)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if sec.username != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(api.BasicCredentials{Username: sec.username, Password: sec.password}))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	return proto.NewAdminClient(cc), nil
}

// options are the global and verb flags.
type options struct {
	node       string
	vhost      string
	json       bool
	consistent bool
	timeout    time.Duration

	priority    int
	applyTo     string
	ifUnused    bool
	ifEmpty     bool
	description string
	local       bool

	// managementURL is the node's management HTTP API, for the
	// definitions verbs (definitions.go).
	managementURL string

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
	fs.BoolVar(&o.json, "json", false, "print one JSON document")
	fs.BoolVar(&o.consistent, "consistent", false, "read from the leader")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "deadline of the call")
	fs.IntVar(&o.priority, "priority", 0, "policy priority")
	fs.StringVar(&o.applyTo, "apply-to", "all", "what a policy applies to: queues, exchanges or all")
	fs.BoolVar(&o.ifUnused, "if-unused", false, "delete_queue: only if the queue has no consumers")
	fs.BoolVar(&o.ifEmpty, "if-empty", false, "delete_queue: only if the queue is empty")
	fs.StringVar(&o.description, "description", "", "add_vhost: description")
	fs.BoolVar(&o.local, "local", false, "list_connections: only the node's own connections")
	fs.StringVar(&o.managementURL, "management-url", envOr("RAFTMQ_MANAGEMENT_URL", defaultManagementURL), "management HTTP API of a node, for export_definitions and import_definitions (env RAFTMQ_MANAGEMENT_URL)")
	fs.StringVar(&o.sec.username, "username", os.Getenv("RAFTMQ_USERNAME"), "user for the admin API, tagged administrator (env RAFTMQ_USERNAME)")
	fs.StringVar(&o.sec.password, "password", os.Getenv("RAFTMQ_PASSWORD"), "password of --username (env RAFTMQ_PASSWORD, which ps does not show)")
	fs.StringVar(&o.sec.tlsCA, "tls-ca", os.Getenv("RAFTMQ_TLS_CA"), "PEM certificate of the cluster CA (with the cluster secret: a node's <data-dir>/cluster-ca.pem): connect with TLS (env RAFTMQ_TLS_CA)")
	fs.StringVar(&o.sec.tlsCert, "tls-cert", os.Getenv("RAFTMQ_TLS_CERT"), "PEM client certificate signed by the cluster CA (env RAFTMQ_TLS_CERT)")
	fs.StringVar(&o.sec.tlsKey, "tls-key", os.Getenv("RAFTMQ_TLS_KEY"), "PEM key of --tls-cert (env RAFTMQ_TLS_KEY)")
	return fs
}

// parseArgs parses flags wherever they appear and returns the positional
// arguments ("--" ends the flags).
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
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
	if err != nil {
		fmt.Fprintf(stderr, "raftmqctl: %v\n", err)
		return exitUsage
	}
	if len(pos) == 0 {
		printUsage(stderr)
		return exitUsage
	}
	name, vargs := pos[0], pos[1:]
	if name == "help" {
		printUsage(stdout)
		return exitOK
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
	err = v.run(&call{ctx: ctx, c: client, o: &o, args: vargs, out: stdout})
	if err == nil {
		return exitOK
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

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: raftmqctl [--node host:port] [-p vhost] [--json] [--consistent] [--timeout d] VERB [ARGS...]")
	fmt.Fprintln(w, "       [--username u --password p] [--tls-ca ca.pem --tls-cert c.pem --tls-key c.key]")
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
