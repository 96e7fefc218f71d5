package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// dotnetClientAssembly lists where Debian's libmono-rabbitmq4.0-cil
// installs RabbitMQ's .NET client (its 1.x line, which Mono ships under
// the assembly version 4.0.0.0).
var dotnetClientAssembly = []string{
	"/usr/lib/mono/4.5/RabbitMQ.Client.dll",
	"/usr/lib/mono/gac/RabbitMQ.Client/4.0.0.0__b03f5f7f11d50a3a/RabbitMQ.Client.dll",
}

// TestCluster_DotNet drives a three-node cluster that places its queues
// with the RabbitMQ .NET client Debian's Mono ships
// (testdata/dotnet/DotNetCheck.cs), speaking AMQP 0-9, each check
// publishing through one node and consuming through another: every
// property and header type round-tripping after a transaction's commit
// (the client has no confirms), prefetch, reject with and without requeue
// and TTL into dead-letter exchanges with x-death, refusals that close
// only the channel, a 1 MiB body, basic.get with message counts, purge
// and delete counts, and a rollback whose messages never arrive.
func TestCluster_DotNet(t *testing.T) {
	skipShort(t)
	mcs, mono, assembly := dotnetToolchain(t)
	exe := compileDotNetCheck(t, mcs, assembly)
	c := placed3.start(t)
	cmd := exec.Command(mono, append([]string{exe}, amqpAddrs(c)...)...)
	// The assembly may be installed outside the GAC, where mono does not
	// look for it by itself.
	cmd.Env = append(os.Environ(), "MONO_PATH="+filepath.Dir(assembly))
	// The program bounds each check itself; a hang past those bounds is
	// killed.
	stdout, stderr, _ := runClient(t, "DotNetCheck", cmd, 5*time.Minute, nil)
	reportChecks(t, ".NET", stdout, stderr)
}

// dotnetToolchain returns mcs, mono and the client's assembly, or skips
// the test naming the Debian packages that are missing.
func dotnetToolchain(t *testing.T) (mcs, mono, assembly string) {
	t.Helper()
	var tc toolchain
	mcs = tc.program("mono-mcs", "mcs")
	mono = tc.program("mono-runtime", "mono")
	assembly = tc.file("libmono-rabbitmq4.0-cil", dotnetClientAssembly...)
	tc.skipIfMissing(t, ".NET")
	return mcs, mono, assembly
}

// compileDotNetCheck compiles testdata/dotnet into a temporary folder, so
// that no build output lands in the source tree, and returns the program.
func compileDotNetCheck(t *testing.T, mcs, assembly string) string {
	t.Helper()
	src, err := filepath.Abs(filepath.Join("testdata", "dotnet", "DotNetCheck.cs"))
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(t.TempDir(), "DotNetCheck.exe")
	cmd := exec.Command(mcs, "-nologo", "-target:exe", "-warnaserror+", "-r:"+assembly, "-out:"+exe, src)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mcs DotNetCheck.cs: %v\n%s", err, b)
	}
	return exe
}
