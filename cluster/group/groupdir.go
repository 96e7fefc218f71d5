package group

import (
	"fmt"
	"path/filepath"
)

// DefaultID is the id of a node's default group: the one group of the
// releases before queue groups. Its directory is the data dir itself and
// its raft connections carry no header, so an upgraded node reads the
// data dir and talks to its peers as before.
const DefaultID = ""

// MaxIDLen is the longest group id, in bytes.
const MaxIDLen = 64

// groupsDir is the folder of the data dir under which every group other
// than the default one has its directory.
const groupsDir = "groups"

// ValidID says whether id may name a group other than the default one:
// 1 to MaxIDLen bytes of a-z, 0-9, '-' and '_'. An id is a directory name
// and travels in a connection's header, so it holds nothing a file
// system could read as a path or fold into another id (no '.', '/',
// capitals).
func ValidID(id string) error {
	if len(id) == 0 || len(id) > MaxIDLen {
		return fmt.Errorf("group: id of %d bytes (1 to %d)", len(id), MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("group: id %q: byte %q is not one of a-z, 0-9, '-', '_'", id, c)
		}
	}
	return nil
}

// Dir is the directory of group id under dataDir (Config.Dir): the data
// dir itself for the default group, where it has always been, and
// dataDir/groups/<id> for any other, with the same layout inside.
func Dir(dataDir, id string) (string, error) {
	if id == DefaultID {
		return dataDir, nil
	}
	if err := ValidID(id); err != nil {
		return "", err
	}
	return filepath.Join(dataDir, groupsDir, id), nil
}
