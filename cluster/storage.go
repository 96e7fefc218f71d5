package cluster

import "github.com/raftmq/raftmq/cluster/group"

// The names of the raft group's storage (package group) that a node's
// configuration and its callers use.
const (
	LogStoreAuto = group.LogStoreAuto
	LogStoreWAL  = group.LogStoreWAL
	LogStoreBolt = group.LogStoreBolt

	DefaultSnapshotThreshold = group.DefaultSnapshotThreshold
	DefaultSnapshotBytes     = group.DefaultSnapshotBytes

	RecoveryDoc = group.RecoveryDoc
)

// DataError is stored raft data that cannot be read (group.DataError).
type DataError = group.DataError
