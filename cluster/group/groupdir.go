package group

import (
	"path/filepath"

	"github.com/raftmq/raftmq/fsm"
)

// DefaultID is the id of a node's default group: the one group of the
// releases before queue groups. Its directory is the data dir itself and
// its raft connections carry no header, so an upgraded node reads the
// data dir and talks to its peers as before.
const DefaultID = ""

// MaxIDLen is the longest group id, in bytes.
const MaxIDLen = fsm.MaxGroupIDLen

// groupsDir is the folder of the data dir under which every group other
// than the default one has its directory.
const groupsDir = "groups"

// ValidID says whether id may name a group other than the default one
// (fsm.ValidGroupID: the metadata log names queue groups by the same
// rule): 1 to MaxIDLen bytes of a-z, 0-9, '-' and '_', so that an id is
// a directory name and a connection header's, and nothing a file system
// could read as a path or fold into another id.
func ValidID(id string) error { return fsm.ValidGroupID(id) }

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
