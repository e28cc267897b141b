package partition

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tabuladb/tabula/lsm"
)

// Stats is a point-in-time report of the table service's shape and
// activity, for metrics. The engine's own are DB().Metrics().
type Stats struct {
	Tables int // tables open (created and not deleted)
	Ranges int // range partitions across them
	// Splits and Merges count the range splits and merges since Open.
	Splits, Merges int64
	// LatchWaits counts the writes that found their partition's latch
	// held by another write and waited for it; LatchWaitTime is the total
	// time they waited. Writes to one hot partition queue there.
	LatchWaits    int64
	LatchWaitTime time.Duration
}

// storeCounters are the counters behind Stats that the store updates as
// it works.
type storeCounters struct {
	splits, merges atomic.Int64
	// tables and ranges count the live tables and their ranges, open or
	// not: counted at Open, kept by catalog edits, splits and merges.
	tables, ranges atomic.Int64
	// closed is set first thing in Close, for Ready.
	closed atomic.Bool
}

// Stats reports the store's tables, ranges and activity. It takes no
// lock a write holds.
func (s *Store) Stats() Stats {
	st := Stats{
		Splits:        s.counters.splits.Load(),
		Merges:        s.counters.merges.Load(),
		LatchWaits:    s.latch.waits.Load(),
		LatchWaitTime: time.Duration(s.latch.waitNanos.Load()),
	}
	st.Tables = int(s.counters.tables.Load())
	st.Ranges = int(s.counters.ranges.Load())
	return st
}

// Ready reports whether the store takes writes: nil while it is open and
// its engine has not stopped on a failed write, flush or compaction (the
// engine's sticky error, lsm.DB.Err), the reason otherwise. It does no
// I/O, so a health check may call it as often as it likes; a disk that
// fails shows here once a write has met the failure.
func (s *Store) Ready() error {
	if s.counters.closed.Load() {
		return fmt.Errorf("partition: the store is closed: %w", lsm.ErrClosed)
	}
	if err := s.db.Err(); err != nil {
		return fmt.Errorf("partition: the store takes no writes: %w", err)
	}
	return nil
}
