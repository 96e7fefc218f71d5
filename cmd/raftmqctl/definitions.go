package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/proto"
)

// The definitions verbs call the node's admin API (ExportDefinitions,
// ImportDefinitions), authenticated as every verb is: by the node's admin
// secret on its host, or an administrator's --username and --password. A
// node from before those calls answers Unimplemented; the verbs then use
// its management HTTP API (GET and POST /api/definitions at
// --management-url) as the administrator --username (guest without one,
// which a node takes from loopback only).

// maxDefinitions bounds a definitions document either way: the node's
// limit on a management request body (mgmt.DefaultMaxBodyBytes), which
// ImportDefinitions applies too.
const maxDefinitions = 64 << 20

// defaultManagementURL is the management API used without
// --management-url or RAFTMQ_MANAGEMENT_URL.
const defaultManagementURL = "http://localhost:15672"

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func init() {
	verbs["export_definitions"] = verb{args: "FILE|-", min: 1, max: 1, run: exportDefinitions,
		help: "The whole broker's definitions in RabbitMQ's JSON format, password hashes included: FILE\n" +
			"is written readable by its owner alone. Run as the node's OS user, the admin secret\n" +
			"authenticates it (no password), as rabbitmqctl's Erlang cookie does."}
	verbs["import_definitions"] = verb{args: "FILE|-", min: 1, max: 1, run: importDefinitions,
		help: "Applies definitions in RabbitMQ's JSON format (at most 64 MiB) through the log, printing a\n" +
			"warning for each thing raftmq keeps but does not act on. Authenticated as export_definitions."}
}

// management calls the management API and returns the body of a 2xx
// answer; any other answer is an error with RabbitMQ's reason.
func (c *call) management(method, path string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(c.ctx, method, strings.TrimSuffix(c.o.managementURL, "/")+path, bytes.NewReader(body))
	if err != nil {
		return nil, usagef("--management-url: %v", err)
	}
	user, pass := c.o.sec.Username, c.o.sec.Password
	if user == "" {
		user, pass = "guest", "guest"
	}
	req.SetBasicAuth(user, pass)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "connection error: %v", err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "connection error: %v", err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct{ Reason string }
		_ = json.Unmarshal(out, &e)
		if e.Reason == "" {
			e.Reason = strings.TrimSpace(string(out))
		}
		code := codes.Unknown
		switch resp.StatusCode {
		case http.StatusUnauthorized:
			code = codes.Unauthenticated
		case http.StatusNotFound:
			code = codes.NotFound
		case http.StatusBadRequest:
			code = codes.InvalidArgument
		}
		return out, status.Errorf(code, "%s %s: %d %s", method, path, resp.StatusCode, e.Reason)
	}
	return out, nil
}

// exportDefinitions writes the cluster's definitions to FILE, or stdout
// for "-".
func exportDefinitions(c *call) error {
	var body []byte
	r, err := c.c.ExportDefinitions(c.ctx, &proto.ExportDefinitionsRequest{}, grpc.MaxCallRecvMsgSize(maxDefinitions+1<<20))
	switch {
	case status.Code(err) == codes.Unimplemented:
		body, err = c.management(http.MethodGet, "/api/definitions", nil)
	case err == nil:
		body = r.GetDefinitions()
	}
	if err != nil {
		return err
	}
	var doc any
	if err := json.Unmarshal(body, &doc); err != nil {
		return fmt.Errorf("the node answered no JSON: %w", err)
	}
	pretty, _ := json.MarshalIndent(doc, "", "  ")
	pretty = append(pretty, '\n')
	if c.args[0] == "-" {
		_, err := c.out.Write(pretty)
		return err
	}
	if err := os.WriteFile(c.args[0], pretty, 0o600); err != nil {
		return err
	}
	return c.done("Exported definitions to "+c.args[0], map[string]any{"file": c.args[0]})
}

// importDefinitions imports FILE (stdin for "-") and prints each warning
// (arguments raftmq keeps but does not act on).
func importDefinitions(c *call) error {
	var (
		data []byte
		err  error
	)
	if c.args[0] == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(c.args[0])
	}
	if err != nil {
		return err
	}
	if len(data) > maxDefinitions {
		return fmt.Errorf("%s: %d bytes, the node takes definitions of at most %d", c.args[0], len(data), maxDefinitions)
	}
	var res struct {
		Warnings []string `json:"warnings"`
		Errors   []string `json:"errors"`
	}
	r, err := c.c.ImportDefinitions(c.ctx, &proto.ImportDefinitionsRequest{Definitions: data}, grpc.MaxCallSendMsgSize(maxDefinitions+1<<20))
	if status.Code(err) == codes.Unimplemented {
		var body []byte
		body, err = c.management(http.MethodPost, "/api/definitions", data)
		_ = json.Unmarshal(body, &res)
		for _, e := range res.Errors {
			fmt.Fprintln(c.out, "error: "+e)
		}
	} else {
		res.Warnings = r.GetWarnings()
	}
	if err != nil {
		return err
	}
	if c.o.json {
		return c.done("", map[string]any{"warnings": res.Warnings})
	}
	for _, w := range res.Warnings {
		fmt.Fprintln(c.out, "warning: "+w)
	}
	return c.done(fmt.Sprintf("Imported definitions from %s (%d warnings)", c.args[0], len(res.Warnings)), nil)
}
