package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The real clients' tests (Java, .NET, Bunny, pika, kombu and Celery) run
// a program of the client's language against a cluster; one whose check
// failed exits non-zero and says why in what it prints (the Java, .NET,
// kombu and Celery programs print a line for each check). A program that
// needs a node killed (its failover) prints "KILL <port>" and waits for
// "KILLED" on stdin.

// runClient runs cmd, the program name, in a process group of its own (in a temporary
// folder unless cmd.Dir is set), hands each line it prints on stdout to
// onLine (nil: none) and writes a non-empty answer to its stdin, and
// returns what it printed on stdout and stderr. A program that exits
// non-zero or still runs after timeout (then killed, with its children)
// fails the test with its output; ok reports that it exited 0 in time.
func runClient(t *testing.T, name string, cmd *exec.Cmd, timeout time.Duration, onLine func(string) string) (stdout, stderr string, ok bool) {
	t.Helper()
	if cmd.Dir == "" {
		cmd.Dir = t.TempDir()
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	var timedOut atomic.Bool
	kill := func() { once.Do(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }) }
	timer := time.AfterFunc(timeout, func() { timedOut.Store(true); kill() })
	// A t.Fatal in onLine must not leave the program running.
	defer func() {
		timer.Stop()
		if cmd.ProcessState == nil {
			kill()
			_ = cmd.Wait()
		}
	}()
	var outb strings.Builder
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		outb.WriteString(line + "\n")
		if onLine == nil {
			continue
		}
		if reply := onLine(line); reply != "" {
			if _, err := io.WriteString(in, reply+"\n"); err != nil {
				t.Errorf("write %q to %s: %v", reply, name, err)
			}
		}
	}
	err = cmd.Wait()
	timer.Stop()
	stdout, stderr = outb.String(), errb.String()
	switch {
	case timedOut.Load():
		t.Errorf("%s still running after %v; killed\n%s%s", name, timeout, stdout, stderr)
	case err != nil:
		t.Errorf("%s: %v\n%s%s", name, err, stdout, stderr)
	default:
		t.Logf("%s:\n%s%s", name, stdout, stderr)
		return stdout, stderr, true
	}
	return stdout, stderr, false
}

// reportChecks fails the test for each line of the program's output that
// says "FAIL <check>: why", and when none does and no line says "ALL
// PASSED" either.
func reportChecks(t *testing.T, client, stdout, stderr string) {
	t.Helper()
	failed := false
	for _, line := range strings.Split(stdout+"\n"+stderr, "\n") {
		if f, ok := strings.CutPrefix(line, "FAIL "); ok {
			t.Errorf("%s client check failed: %s", client, f)
			failed = true
		}
	}
	if !failed && !strings.Contains("\n"+stdout, "\nALL PASSED\n") {
		t.Errorf("the %s client's program did not report its checks passed", client)
	}
}

// nodeKiller answers a program's "KILL <port>": it kills (-9) the running
// node of c whose AMQP port that is and answers "KILLED". before, when
// set, runs just before the kill. killed reports the index of the node it
// killed last (-1: none).
func nodeKiller(t *testing.T, c *Cluster, before func(*Node)) (onLine func(string) string, killed func() int) {
	victim := -1
	onLine = func(line string) string {
		port, ok := strings.CutPrefix(line, "KILL ")
		if !ok {
			return ""
		}
		for i, n := range c.Nodes {
			if _, p, _ := net.SplitHostPort(n.AMQPAddr); p == port && n.Running() {
				if before != nil {
					before(n)
				}
				c.Kill(i)
				victim = i
				t.Logf("killed %s (-9), the node on AMQP port %s", n.ID, port)
				return "KILLED"
			}
		}
		t.Errorf("the client asked to kill the node on port %s; no running node listens there", port)
		return "NO SUCH NODE"
	}
	return onLine, func() int { return victim }
}

// amqpAddrs is the AMQP address of each node of c, in order: the
// programs take them as arguments.
func amqpAddrs(c *Cluster) []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.AMQPAddr
	}
	return addrs
}

// testdataPath is the absolute path of testdata/name.
func testdataPath(t *testing.T, name ...string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join(append([]string{"testdata"}, name...)...))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// toolchain gathers the programs and files a client's check needs, noting
// each that is missing against the Debian package that brings it, so that
// one skip names every package to install.
type toolchain struct {
	missing []toolchainGap
}

// toolchainGap is a Debian package to install and what of it was missing.
type toolchainGap struct {
	pkg  string
	what []string
}

func (tc *toolchain) note(pkg, what string) {
	if i := slices.IndexFunc(tc.missing, func(g toolchainGap) bool { return g.pkg == pkg }); i >= 0 {
		tc.missing[i].what = append(tc.missing[i].what, what)
		return
	}
	tc.missing = append(tc.missing, toolchainGap{pkg, []string{what}})
}

// program is the path of name on PATH, or "" (noted against pkg).
func (tc *toolchain) program(pkg, name string) string {
	p, err := exec.LookPath(name)
	if err != nil {
		tc.note(pkg, name)
		return ""
	}
	return p
}

// file is the first of paths that is a regular file, or "" (noted against
// pkg): packages install to different places in different releases.
func (tc *toolchain) file(pkg string, paths ...string) string {
	p := firstRegularFile(paths...)
	if p == "" {
		tc.note(pkg, strings.Join(paths, " or "))
	}
	return p
}

// skipIfMissing skips the test, naming the Debian packages of all that was
// missing, if anything was.
func (tc *toolchain) skipIfMissing(t *testing.T, client string) {
	t.Helper()
	if len(tc.missing) == 0 {
		return
	}
	pkgs := make([]string, len(tc.missing))
	for i, g := range tc.missing {
		pkgs[i] = fmt.Sprintf("%s (%s)", g.pkg, strings.Join(g.what, ", "))
	}
	t.Skipf("the %s client check needs the Debian packages %s", client, strings.Join(pkgs, ", "))
}

// firstRegularFile is the first of paths that is a regular file, or "".
func firstRegularFile(paths ...string) string {
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p
		}
	}
	return ""
}
