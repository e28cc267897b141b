// Package lsm is Tabula's ordered key-value engine: a log-structured merge
// tree with a write-ahead log, skiplist memtables, leveled compaction of
// sstables, snapshots and atomic batches.
//
// A write is a Batch. The commit pipeline (commit.go) gives each batch a
// range of sequence numbers and room in the mutable memtable, and appends it
// to the WAL as one record, under its lock; then, outside the lock and in
// parallel with other writers, it inserts the batch into the memtable, and
// publishes its sequence numbers once every batch before it is in too, so a
// batch becomes visible to readers all at once. Synced writers share fsyncs
// (group commit). Memtables start small and double up to MemTableSize;
// their arenas are mapped outside the Go heap and released when the last
// reader of a flushed one lets go. DB.Enqueue and PendingCommit.Wait split a commit into its
// ordering and its durability wait, for callers that serialize writes under
// a lock of their own and should hold it only for the first (DB.GetApplied
// reads what such a predecessor enqueued). A full memtable is rotated to an
// immutable one and written to an L0 sstable by a background flush
// (flush.go); background compactions (compaction.go) merge tables down the
// levels. Every change to the set of
// live tables is a version edit appended to the MANIFEST (version_set.go).
//
// Reads load a readState (the memtables and the current version, pinned by
// reference counts) and see exactly the writes at or below their sequence
// number: the latest published one, or a Snapshot's.
//
// Storage failures stop writes. When a WAL write or sync, a flush or a
// compaction fails, the call that hit it returns the error, and every later
// write, Flush and Compact fails with an error wrapping ErrStopped and that
// cause (DB.Err returns it), so no write is acknowledged that the failed
// disk could lose. Reads and Close keep working, and reopening the DB once
// the disk is healthy recovers every acknowledged write. The tests check
// this with the fault-injecting and crash-cloning filesystems of package
// vfs.
//
//	db, err := lsm.Open("data", nil)
//	if err != nil { ... }
//	defer db.Close()
//	err = db.Set([]byte("k"), []byte("v"), nil) // nil options: synced
//	v, err := db.Get([]byte("k"))
//	it := db.NewIter(&lsm.IterOptions{LowerBound: []byte("a"), UpperBound: []byte("b")})
//	for ok := it.First(); ok; ok = it.Next() { use(it.Key(), it.Value()) }
//	err = it.Close()
package lsm
