package partition

import (
	"encoding/binary"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// latchStripes is the number of partition latches. Partitions share a latch
// when their hashes collide, which only serializes writes that could have
// run in parallel; 1024 stripes make that rare for the number of writers a
// node runs at once.
const latchStripes = 1024

// latches serializes the writes to one partition: a conditional write reads
// the current entity, checks the condition and enqueues its commit while
// holding its partition's latch, so no other write to the partition can
// slip between the check and the commit. It releases the latch before
// waiting for the commit to be durable (lsm.DB.Enqueue,
// lsm.PendingCommit.Wait): the next writer reads with lsm.DB.GetApplied,
// so it checks its condition against the previous write even while that
// is still pending, and its own commit is ordered after it (if the
// previous one fails, the engine stops and this one fails too). The
// writers of a hot partition thus share fsyncs through group commit
// instead of taking one each under the latch. Readers never take latches;
// they read at a snapshot, and see a write only once it is durable.
//
// A writer takes its table's t.mu shared before the latch and releases it
// after the latch, once its statistics are recorded (see recordWrite).
type latches struct {
	seed maphash.Seed
	// waits and waitNanos count the acquisitions that found the latch
	// held, and how long they waited (Stats).
	waits, waitNanos atomic.Int64
	stripes          [latchStripes]struct {
		latch
		_ [48]byte // one stripe per cache line: no false sharing
	}
}

// latch is one stripe: the lock, and the last commit ordered under it.
type latch struct {
	sync.Mutex
	// lastSeq is the sequence number of the last batch enqueued under the
	// latch (lsm.PendingCommit.Seq), which may still be pending: a write
	// refused under the latch may rest on it and on nothing later.
	lastSeq uint64
}

func newLatches() *latches { return &latches{seed: maphash.MakeSeed()} }

// forPartition returns the latch of partition pk of table id in account.
func (l *latches) forPartition(account string, id uint64, pk string) *latch {
	var h maphash.Hash
	h.SetSeed(l.seed)
	h.WriteString(account)
	var idb [9]byte
	binary.BigEndian.PutUint64(idb[1:], id) // idb[0] = 0 separates account from id
	h.Write(idb[:])
	h.WriteString(pk)
	return &l.stripes[h.Sum64()%latchStripes].latch
}

// acquire locks x, one of l's stripes, counting the wait if it is held: an
// uncontended latch costs one TryLock, no clock read.
func (l *latches) acquire(x *latch) {
	if x.TryLock() {
		return
	}
	start := time.Now()
	x.Lock()
	l.waits.Add(1)
	l.waitNanos.Add(int64(time.Since(start)))
}
