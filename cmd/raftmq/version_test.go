package main

import (
	"io"
	"testing"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/internal/version"
)

func TestWantsVersion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"--version"}, true},
		{[]string{"-version"}, true},
		{[]string{"--data-dir", "d", "--version"}, true},
		{nil, false},
		{[]string{"version"}, false},
		{[]string{"--", "--version"}, false},
		{[]string{"--versions"}, false},
	} {
		if got := wantsVersion(tc.args); got != tc.want {
			t.Errorf("wantsVersion(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

func TestProductVersion(t *testing.T) {
	// A test binary has no module version: "dev" unless -ldflags set one.
	if got := ops.ProductVersion(); got != "dev" {
		t.Fatalf("ProductVersion() = %q, want dev", got)
	}
	old := version.Version
	t.Cleanup(func() { version.Version = old })
	version.Version = "v1.2.3"
	if got := ops.ProductVersion(); got != "v1.2.3" {
		t.Fatalf("ProductVersion() with -ldflags = %q", got)
	}
}

func TestRun_HelpExitsZero(t *testing.T) {
	for _, a := range []string{"--help", "-h"} {
		if code := run([]string{a}, func(string) string { return "" }, io.Discard); code != 0 {
			t.Fatalf("raftmq %s: exit %d, want 0", a, code)
		}
	}
}
