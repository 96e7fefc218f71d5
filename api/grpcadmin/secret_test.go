package grpcadmin

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/raftmq/raftmq/api/client"
)

func TestLocalSecret_GeneratedOnceOwnerOnly(t *testing.T) {
	dir := t.TempDir()
	first, created, err := LocalSecret(dir)
	if err != nil || !created {
		t.Fatalf("first start: created %v, %v", created, err)
	}
	if len(first) != 2*secretBytes {
		t.Fatalf("secret of %d characters, want %d (256 bits in hex)", len(first), 2*secretBytes)
	}
	path := filepath.Join(dir, client.SecretFileName)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Fatalf("mode %04o, want 0600", perm)
	}
	again, created, err := LocalSecret(dir)
	if err != nil || created || !bytes.Equal(again, first) {
		t.Fatalf("second start: created %v, same %v, %v", created, bytes.Equal(again, first), err)
	}
	read, err := client.ReadSecret(path)
	if err != nil || read != string(first) {
		t.Fatalf("raftmqctl reads %q, %v; the node uses %q", read, err, first)
	}
	other, _, err := LocalSecret(t.TempDir())
	if err != nil || bytes.Equal(other, first) {
		t.Fatalf("another node's secret: %q, %v", other, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("left behind: %v", entries)
	}
}

func TestLocalSecret_RefusesReadableByOthers(t *testing.T) {
	for _, mode := range []os.FileMode{0o640, 0o604, 0o620, 0o666} {
		dir := t.TempDir()
		if _, _, err := LocalSecret(dir); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, client.SecretFileName)
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, _, err := LocalSecret(dir)
		if err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("mode %04o: %v, want a refusal naming chmod 600", mode, err)
		}
	}
}

func TestLocalSecret_RefusesOddFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, client.SecretFileName)
	if err := os.WriteFile(path, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LocalSecret(dir); err == nil || !strings.Contains(err.Error(), "at least") {
		t.Errorf("short secret: %v", err)
	}
	// A link could point at a file someone else controls.
	dir = t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, []byte(strings.Repeat("a", 64)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, client.SecretFileName)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LocalSecret(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("symbolic link: %v", err)
	}
}

// TestLocalSecret_RefusesAnotherOwner needs root to give the file away.
func TestLocalSecret_RefusesAnotherOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown the secret file to another user")
	}
	dir := t.TempDir()
	if _, _, err := LocalSecret(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(dir, client.SecretFileName), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LocalSecret(dir); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Errorf("file of another user: %v", err)
	}
}
