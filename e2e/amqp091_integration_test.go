package e2e

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAMQP091Integration runs amqp091-go's own integration tests against
// a raftmq node through e2e/scripts/amqp091-integration.sh: the
// connection-recovery tests, which find their connection by its
// client-given name in the management API's /api/connections and
// force-close it there, and every other test of the client that can pass
// against a broker other than RabbitMQ.
func TestAMQP091Integration(t *testing.T) {
	skipShort(t)
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash to run e2e/scripts/amqp091-integration.sh")
	}
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := Binary(t)
	_, amqpPort, _ := net.SplitHostPort(FreeAddr(t))
	_, mgmtPort, _ := net.SplitHostPort(FreeAddr(t))
	cmd := exec.Command(bash, filepath.Join(root, "e2e", "scripts", "amqp091-integration.sh"), "-v")
	cmd.Env = append(os.Environ(), "RAFTMQ_BIN="+bin, "RAFTMQ_AMQP_PORT="+amqpPort, "RAFTMQ_MANAGEMENT_PORT="+mgmtPort)
	cmd.Env = slicesWithout(cmd.Env, "AMQP_URL=")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 77 {
		t.Skipf("amqp091-go's tests cannot run here:\n%s", out.String())
	}
	if err != nil {
		// The whole output is long and a report may keep only its ends:
		// the failing tests' own lines come first.
		t.Fatalf("amqp091-integration.sh: %v\nthe failing tests:\n%s\nthe whole output:\n%s", err, failedTests(out.String()), out.String())
	}
	// A -run that matched nothing would pass without testing anything.
	if !strings.Contains(out.String(), "--- PASS: TestConnectionRecoveryPublish") {
		t.Fatalf("the connection-recovery tests did not run:\n%s", out.String())
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, "--- ") || strings.HasPrefix(line, "ok ") {
			t.Log(line)
		}
	}
}

// failedTests picks out of go test -v output the lines of each test that
// failed: the lines printed under its name (go test heads a test's lines
// with "=== RUN", "=== CONT" or "=== NAME" and the test's name), its
// "--- FAIL" line, and any panic or package FAIL line. A test still
// running when the suite's timeout panicked never prints "--- FAIL":
// the lines of each test the panic names as running come last.
func failedTests(out string) string {
	lines := map[string][]string{}
	var cur string
	var tail int
	var running []string
	var b strings.Builder
	for _, line := range strings.Split(out, "\n") {
		if tail > 0 {
			b.WriteString(line + "\n")
			tail--
			// "panic: test timed out after 20m0s" is followed by
			// "running tests:" and a line "\t\tTestName (19m59s)" each.
			if f := strings.Fields(line); len(f) == 2 && strings.HasPrefix(f[0], "Test") && strings.HasPrefix(f[1], "(") {
				running = append(running, f[0])
			}
			continue
		}
		trim := strings.TrimSpace(line)
		for _, head := range []string{"=== RUN", "=== CONT", "=== NAME", "=== PAUSE"} {
			if name, ok := strings.CutPrefix(trim, head); ok {
				cur = strings.TrimSpace(name)
			}
		}
		switch {
		case strings.HasPrefix(trim, "--- FAIL: "):
			name, _, _ := strings.Cut(strings.TrimPrefix(trim, "--- FAIL: "), " ")
			for _, l := range lines[name] {
				b.WriteString(l + "\n")
			}
			b.WriteString(line + "\n")
		case strings.HasPrefix(trim, "FAIL"):
			b.WriteString(line + "\n")
		case strings.HasPrefix(trim, "panic:"), strings.HasPrefix(trim, "goleak:"):
			// The package's TestMain checks for leaked goroutines once
			// every test passed; that and a panic name no test: the
			// lines after them say what.
			b.WriteString(line + "\n")
			tail = 40
		case cur != "" && !strings.HasPrefix(trim, "===") && !strings.HasPrefix(trim, "--- "):
			lines[cur] = append(lines[cur], line)
		}
	}
	for _, name := range running {
		b.WriteString("the lines of " + name + ", running at the panic:\n")
		for _, l := range lines[name] {
			b.WriteString(l + "\n")
		}
	}
	if b.Len() == 0 {
		return "(none named: see the whole output)\n"
	}
	return b.String()
}

// slicesWithout drops the environment entries that start with prefix, so
// that a caller's AMQP_URL does not send the script to another broker.
func slicesWithout(env []string, prefix string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, prefix) {
			out = append(out, e)
		}
	}
	return out
}

func TestFailedTests_NamesOnlyTheFailuresLines(t *testing.T) {
	out := strings.Join([]string{
		"=== RUN   TestGood",
		"    good_test.go:1: fine",
		"--- PASS: TestGood (0.00s)",
		"=== RUN   TestBad",
		"=== PAUSE TestBad",
		"=== RUN   TestOther",
		"    other_test.go:2: other",
		"=== CONT  TestBad",
		"    bad_test.go:3: timed out",
		"--- PASS: TestOther (0.00s)",
		"--- FAIL: TestBad (1.00s)",
		"FAIL",
		"goleak: Errors on successful test run: found unexpected goroutines:",
		"[Goroutine 7 in state select]",
	}, "\n")
	got := failedTests(out)
	want := "    bad_test.go:3: timed out\n--- FAIL: TestBad (1.00s)\nFAIL\n" +
		"goleak: Errors on successful test run: found unexpected goroutines:\n[Goroutine 7 in state select]\n"
	if got != want {
		t.Fatalf("failedTests:\n%q\nwant\n%q", got, want)
	}

	// A test that hangs until the suite's timeout prints no "--- FAIL".
	out = strings.Join([]string{
		"=== RUN   TestGood",
		"--- PASS: TestGood (0.00s)",
		"=== RUN   TestHung",
		"amqp091-go log: 10:00:00.000001 Channel 1 recovery attempt 1 of 5",
		"    hung_test.go:4: waiting",
		"panic: test timed out after 20m0s",
		"\trunning tests:",
		"\t\tTestHung (19m59s)",
		"",
		"goroutine 1 [running]:",
	}, "\n")
	got = failedTests(out)
	want = "panic: test timed out after 20m0s\n\trunning tests:\n\t\tTestHung (19m59s)\n\ngoroutine 1 [running]:\n" +
		"the lines of TestHung, running at the panic:\n" +
		"amqp091-go log: 10:00:00.000001 Channel 1 recovery attempt 1 of 5\n    hung_test.go:4: waiting\n"
	if got != want {
		t.Fatalf("failedTests of a timeout:\n%q\nwant\n%q", got, want)
	}
}
