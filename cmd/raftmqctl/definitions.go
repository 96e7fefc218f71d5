package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The definitions verbs talk to a node's management HTTP API (the gRPC
// admin API carries no password hashes): GET and POST /api/definitions,
// as the administrator --username (guest without one, which a node takes
// from loopback only).

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
	verbs["export_definitions"] = verb{args: "FILE|-", min: 1, max: 1, run: exportDefinitions}
	verbs["import_definitions"] = verb{args: "FILE|-", min: 1, max: 1, run: importDefinitions}
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
	body, err := c.management(http.MethodGet, "/api/definitions", nil)
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
	body, err := c.management(http.MethodPost, "/api/definitions", data)
	var res struct {
		Warnings []string `json:"warnings"`
		Errors   []string `json:"errors"`
	}
	_ = json.Unmarshal(body, &res)
	if err != nil {
		for _, e := range res.Errors {
			fmt.Fprintln(c.out, "error: "+e)
		}
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
