package version

import (
	"runtime/debug"
	"testing"
)

func TestString(t *testing.T) {
	old := Version
	t.Cleanup(func() { Version = old })
	Version = ""
	// A test binary records no module version.
	if got := String(); got != "dev" {
		t.Fatalf("String() = %q, want dev", got)
	}
	Version = "v1.2.3"
	if got := String(); got != "v1.2.3" {
		t.Fatalf("String() with -ldflags = %q", got)
	}
}

func TestFromBuildInfo(t *testing.T) {
	for v, want := range map[string]string{
		"":                                   "dev",
		"(devel)":                            "dev",
		"v0.4.0":                             "v0.4.0",
		"v0.0.0-20261125202200-104261e2a3c4": "v0.0.0-20261125202200-104261e2a3c4",
	} {
		if got := fromBuildInfo(&debug.BuildInfo{Main: debug.Module{Version: v}}); got != want {
			t.Errorf("module version %q: %q, want %q", v, got, want)
		}
	}
}
