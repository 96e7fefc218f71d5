package e2e

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestLocalAdmin_AnotherOSUserIsRefused runs raftmqctl as user nobody on
// the node's host against a real node with the default admin auth: the
// loopback address it calls from is no credential, and nobody cannot read
// the node's admin secret, so adding a user is refused, while the node's
// own OS user, with the secret, administers the node.
func TestLocalAdmin_AnotherOSUserIsRefused(t *testing.T) {
	skipShort(t)
	if os.Geteuid() != 0 {
		t.Skip("runs raftmqctl as user nobody, which needs root: run this test as root to cover local administration by another OS user")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	uid, _ := strconv.ParseUint(nobody.Uid, 10, 32)
	gid, _ := strconv.ParseUint(nobody.Gid, 10, 32)

	c := StartCluster(t, 1)
	n := c.Nodes[0]
	secretFile := filepath.Join(n.DataDir, "admin-secret")

	// nobody must be able to run raftmqctl and to reach the data dir, so
	// that only the secret file's own mode keeps it out: a copy of the
	// binary in a folder everyone may enter, and the test's folders along
	// the data dir's path opened for others.
	bin := filepath.Join(t.TempDir(), "raftmqctl")
	copyFile(t, CtlBinary(t), bin, 0o755)
	for _, d := range []string{filepath.Dir(bin), n.DataDir} {
		for ; d != os.TempDir() && d != filepath.Dir(d); d = filepath.Dir(d) {
			fi, err := os.Stat(d)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(d, fi.Mode().Perm()|0o005); err != nil {
				t.Fatal(err)
			}
		}
	}
	asNobody := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"--node", n.GRPCAddr}, args...)...)
		cmd.Dir = "/"
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			return string(out), ee.ExitCode()
		case err != nil:
			t.Fatalf("raftmqctl as nobody: %v", err)
		}
		return string(out), 0
	}

	// The file is the owner's alone.
	fi, err := os.Stat(secretFile)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Fatalf("admin secret mode %04o, want 0600", perm)
	}
	// nobody can reach the file but not read it.
	out, code := asNobody("--secret-file", secretFile, "list_users")
	if code != 64 || !strings.Contains(out, "permission denied") {
		t.Fatalf("nobody reading the secret: exit %d\n%s", code, out)
	}
	// nobody, from loopback with the node's data dir, is refused.
	for _, args := range [][]string{
		{"--data-dir", n.DataDir, "add_user", "mallory", "pw"},
		{"--data-dir", n.DataDir, "set_user_tags", "guest", "administrator", "impersonator"},
		{"add_user", "mallory", "pw"},
	} {
		out, code := asNobody(args...)
		if code != 1 || !strings.Contains(out, "Unauthenticated") {
			t.Fatalf("nobody %v: exit %d\n%s", args, code, out)
		}
		if args[0] == "--data-dir" && !strings.Contains(out, "cannot read the admin secret") {
			t.Fatalf("nobody %v: the refusal does not say why:\n%s", args, out)
		}
	}
	// The node's own user gets in with the secret, and finds no mallory.
	users := ctl(t, n, "list_users")
	if strings.Contains(users, "mallory") || strings.Contains(users, "impersonator") {
		t.Fatalf("nobody changed the users:\n%s", users)
	}
	if !strings.Contains(users, "guest") {
		t.Fatalf("list_users with the secret:\n%s", users)
	}
}

func copyFile(t *testing.T, from, to string, perm os.FileMode) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestLocalAdmin_DefinitionsWithoutPassword: the node's OS user backs up
// and restores the definitions with raftmqctl and no password (the admin
// secret of the data dir, as rabbitmqctl by the Erlang cookie), through
// the admin API: the management API's address given is closed.
func TestLocalAdmin_DefinitionsWithoutPassword(t *testing.T) {
	skipShort(t)
	c := StartCluster(t, 1)
	n := c.Nodes[0]
	ch := channel(t, dial(t, n))
	if _, err := ch.QueueDeclare("backed.up", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	nowhere := "--management-url=http://127.0.0.1:1"
	backup := filepath.Join(t.TempDir(), "backup.json")
	ctl(t, n, nowhere, "export_definitions", backup)
	raw, err := os.ReadFile(backup)
	if err != nil || !strings.Contains(string(raw), `"name": "backed.up"`) {
		t.Fatalf("backup (%v):\n%s", err, raw)
	}
	ctl(t, n, "delete_queue", "backed.up")
	if out := ctl(t, n, "list_queues"); strings.Contains(out, "backed.up") {
		t.Fatalf("the queue was not deleted:\n%s", out)
	}
	if out := ctl(t, n, nowhere, "import_definitions", backup); !strings.Contains(out, "Imported definitions from "+backup) {
		t.Fatalf("import_definitions:\n%s", out)
	}
	if out := ctl(t, n, "list_queues"); !strings.Contains(out, "backed.up") {
		t.Fatalf("the queue was not restored:\n%s", out)
	}
}
