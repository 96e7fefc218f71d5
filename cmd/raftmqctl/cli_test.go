package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/proto"
)

// TestRun_Help: --help, -h and help print the usage to stdout and exit 0,
// as rabbitmqctl; a verb's help names its columns.
func TestRun_Help(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"-q", "--help"}} {
		fake := &fakeAdmin{}
		dial, _ := startFake(t, fake)
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb, dial); code != exitOK {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errb.String())
		}
		for _, want := range []string{"global options:", "--formatter json|table", "-t, --timeout", "\n  list_queues [column ...]\n"} {
			if !strings.Contains(out.String(), want) {
				t.Fatalf("%v: usage lacks %q:\n%s", args, want, out.String())
			}
		}
		if fake.lastRequest() != nil {
			t.Fatalf("%v: help called the node", args)
		}
	}
	for _, args := range [][]string{{"help", "list_queues"}, {"list_queues", "--help"}, {"list_queues", "name", "-h"}} {
		dial, _ := startFake(t, &fakeAdmin{})
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb, dial); code != exitOK {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errb.String())
		}
		for _, want := range []string{"usage: raftmqctl [global options] list_queues [column ...]", "columns (info items):", "\n  messages_ready\n", "without columns: name messages"} {
			if !strings.Contains(out.String(), want) {
				t.Fatalf("%v: verb usage lacks %q:\n%s", args, want, out.String())
			}
		}
	}
	// A verb without columns has no column list.
	var out, errb bytes.Buffer
	if code := run([]string{"help", "purge_queue"}, &out, &errb, nil); code != exitOK || strings.Contains(out.String(), "columns") ||
		!strings.Contains(out.String(), "purge_queue NAME") {
		t.Fatalf("help purge_queue: exit %d\n%s", code, out.String())
	}
	// Help of an unknown verb, and an unknown verb, are usage errors (64).
	for _, args := range [][]string{{"help", "list_queue"}, {"list_queue"}} {
		out.Reset()
		errb.Reset()
		if code := run(args, &out, &errb, nil); code != 64 || errb.String() != "Command 'list_queue' not found.\nDid you mean 'list_queues'?\nraftmqctl --help lists the verbs.\n" {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errb.String())
		}
	}
}

// TestRun_GlobalOptions covers --formatter, --no-table-headers, -q and -t.
func TestRun_GlobalOptions(t *testing.T) {
	cases := []verbCase{
		{name: "formatter json is --json", args: []string{"--formatter", "json", "list_vhosts"},
			stdout: "[\n  {\n    \"name\": \"/\"\n  },\n  {\n    \"name\": \"prod\"\n  }\n]\n"},
		{name: "formatter table after json", args: []string{"--json", "--formatter", "table", "list_vhosts"},
			stdout: "name\n/\nprod\n"},
		{name: "no table headers", args: []string{"--no-table-headers", "list_queues", "-q"},
			stdout: "orders                    12\na-much-longer-queue-name  0\n"},
		{name: "silent is -q and no headers", args: []string{"-s", "list_vhosts"}, stdout: "/\nprod\n"},
		{name: "--silent", args: []string{"list_vhosts", "--silent"}, stdout: "/\nprod\n"},
		{name: "bad formatter", args: []string{"--formatter", "yaml", "list_vhosts"}, code: exitUsage, stderr: "json or table"},
		{name: "bad -t", args: []string{"-t", "0", "list_vhosts"}, code: exitUsage, stderr: "positive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { runCase(t, &fakeAdmin{}, tc) })
	}

	// Informational lines go to stderr, and -q drops them.
	for _, quiet := range []bool{false, true} {
		dial, _ := startFake(t, &fakeAdmin{})
		var out, errb bytes.Buffer
		args := []string{"-p", "prod", "list_queues"}
		if quiet {
			args = append([]string{"--quiet"}, args...)
		}
		if code := run(args, &out, &errb, dial); code != exitOK {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		has := strings.Contains(errb.String(), "Listing queues for vhost prod ...")
		if has == quiet {
			t.Fatalf("quiet %v: stderr %q", quiet, errb.String())
		}
		if strings.Contains(out.String(), "Listing") {
			t.Fatalf("informational line on stdout: %q", out.String())
		}
	}
}

func TestTimeoutFlag(t *testing.T) {
	for in, want := range map[string]time.Duration{"5": 5 * time.Second, "0.5": 500 * time.Millisecond, "2m": 2 * time.Minute} {
		var d time.Duration
		if err := (timeoutFlag{&d}).Set(in); err != nil || d != want {
			t.Fatalf("-t %s: %v, %v", in, d, err)
		}
	}
	for _, in := range []string{"soon", "-1", "0s"} {
		var d time.Duration
		if err := (timeoutFlag{&d}).Set(in); err == nil {
			t.Fatalf("-t %s accepted", in)
		}
	}
	// The deadline reaches the call: a node slower than -t fails it.
	fake := &slowAdmin{delay: 2 * time.Second}
	dial, _ := startFake(t, fake)
	var out, errb bytes.Buffer
	start := time.Now()
	code := run([]string{"-t", "0.2", "list_vhosts"}, &out, &errb, dial)
	if code == exitOK || time.Since(start) > 1500*time.Millisecond || !strings.Contains(errb.String(), "DeadlineExceeded") {
		t.Fatalf("-t 0.2 against a 2s node: exit %d after %v, %q", code, time.Since(start), errb.String())
	}
}

// slowAdmin answers ListVhosts after delay.
type slowAdmin struct {
	fakeAdmin
	delay time.Duration
}

func (s *slowAdmin) ListVhosts(ctx context.Context, r *proto.ListRequest) (*proto.ListVhostsResponse, error) {
	select {
	case <-time.After(s.delay):
		return &proto.ListVhostsResponse{}, nil
	case <-ctx.Done():
		// The server sees the propagated deadline too, and may answer
		// before the client gives up: it must not answer with success.
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}
