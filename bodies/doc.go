// Package bodies keeps the message bodies a node's state still
// references but that must outlive the raft log prefix that carried them.
//
// A queued message refers to its body by Key: the log index of the entry
// that carried its Publish command and the command's position in that
// entry. The body stays in the log entry while the log has it; Retain
// copies ("relocates") into node-local body files the live bodies of the
// log prefix raft is about to delete, and Pin tells the log store how far
// it may delete. ReadBodies stores the bodies a follower receives with a
// snapshot; WriteBodies sends them. DESIGN.md has the file format and the
// relocation and reclamation policy.
//
// # Locking
//
// Each piece of state has one owner:
//
//   - Store.maint serialises whatever changes the set of files: Retain,
//     ReadBodies, the deletion of obsolete files (at the end of the last
//     hold, in Retain, or as a holder lets go of maint after the last
//     hold ended while it held it: unlockMaint) and Close. It also owns nextSeq. Writers build
//     their files without any other lock, since only they touch them
//     before they are installed.
//   - Store.mu (a RWMutex) guards the list of files, each file's obsolete
//     flag, pin, the hold count and closed. Get, Has and WriteBodies hold
//     it shared for a file lookup and the read of the record (a pread on
//     a file that never changes once written), so a file is closed only
//     once no reader holds it: deleteObsolete removes a file from the
//     list under mu held exclusively and closes it after.
//   - A file's index columns are written once, before the file joins the
//     list, and only read after.
//   - The entry cache has its own mutex: a Get from the log never waits
//     on mu or maint.
//   - Counters (Stats) are atomics.
//
// Lock order: maint before mu; the cache lock is taken alone. Get never
// takes maint, so the apply goroutine never waits for a Retain's copying:
// Retain holds mu exclusively only to install files and move the pin.
package bodies
