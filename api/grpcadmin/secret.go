package grpcadmin

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/raftmq/raftmq/api/client"
)

// secretBytes is the entropy of a generated local admin secret (256 bits).
const secretBytes = 32

// minSecretLen is the shortest secret file content taken: a secret an
// operator wrote by hand must still be hard to guess.
const minSecretLen = 32

// LocalSecret returns the local admin secret kept in dataDir
// (client.SecretFileName), generating it at the first start: 256 random
// bits, hex-encoded, in a file only the node's OS user may read (0600),
// like the Erlang cookie rabbitmqctl reads. A file that someone else owns
// or that the group or others may read or write is refused: whoever can
// read it administers the node. created says the file was made now.
func LocalSecret(dataDir string) (secret []byte, created bool, err error) {
	path := filepath.Join(dataDir, client.SecretFileName)
	if err := checkSecretFile(path); err == nil {
		s, err := client.ReadSecret(path)
		if err != nil {
			return nil, false, fmt.Errorf("admin secret: %w", err)
		}
		if len(s) < minSecretLen {
			return nil, false, fmt.Errorf("admin secret %s: %d characters, at least %d needed (delete the file to have a new one generated)", path, len(s), minSecretLen)
		}
		return []byte(s), false, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, err
	}
	raw := make([]byte, secretBytes)
	if _, err := rand.Read(raw); err != nil {
		return nil, false, fmt.Errorf("admin secret: %w", err)
	}
	s := hex.EncodeToString(raw)
	// Written aside and linked into place, so the file never exists
	// half written or with a wider mode, and a file made meanwhile by
	// another start wins.
	f, err := os.CreateTemp(dataDir, "."+client.SecretFileName+".tmp*") // mode 0600
	if err != nil {
		return nil, false, fmt.Errorf("admin secret: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(s + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(f.Name(), path)
	}
	if errors.Is(err, fs.ErrExist) {
		return LocalSecret(dataDir)
	}
	if err != nil {
		return nil, false, fmt.Errorf("admin secret: %w", err)
	}
	return []byte(s), true, nil
}

// checkSecretFile refuses a secret file that is not a regular file of the
// process's user with no permission for group or others.
func checkSecretFile(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("admin secret %s is not a regular file (%s)", path, fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("admin secret %s has mode %04o: other users could read it and administer this node; make it readable by its owner only (chmod 600 %s)", path, perm, path)
	}
	if uid, ok := fileOwner(fi); ok && uid != os.Geteuid() {
		return fmt.Errorf("admin secret %s belongs to uid %d, not to this process's uid %d: run the node as the user that owns its data dir, or chown the file", path, uid, os.Geteuid())
	}
	return nil
}
