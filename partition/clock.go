package partition

import (
	"sync"
	"time"

	"github.com/tabuladb/tabula/odata"
)

// leaseTicks is how far ahead of the timestamps it has issued the clock
// persists its lease: one second, so a renewal costs one synced write per
// second of writes at most, and a restart after a crash starts at most one
// second ahead of the last timestamp.
const leaseTicks = odata.DateTime(10_000_000)

// clock issues the commit timestamps of writes. They are strictly
// increasing across the whole store (ticks = max(now, last+1)), so that
// every write has a new ETag even when the wall clock stalls or steps back.
//
// To stay increasing across restarts, the clock persists a lease: a value
// no issued timestamp exceeds. A timestamp at or past the lease first
// extends it (a synced write), and Close records the last timestamp exactly,
// so the next Open resumes after it even if the wall clock is behind.
type clock struct {
	mu        sync.Mutex
	now       func() time.Time
	last      odata.DateTime // newest timestamp issued
	lease     odata.DateTime // durable bound on issued timestamps
	saveLease func(odata.DateTime) error
}

// next reserves n consecutive timestamps, all after floor (the timestamp of
// the entity being overwritten, which keeps one entity's ETags increasing
// whatever the clock did), and returns the first.
func (c *clock) next(n int, floor odata.DateTime) (odata.DateTime, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := odata.DateTimeFromTime(c.now())
	if t <= c.last {
		t = c.last + 1
	}
	if t <= floor {
		t = floor + 1
	}
	end := t + odata.DateTime(n) - 1
	if end >= c.lease {
		lease := end + leaseTicks
		if err := c.saveLease(lease); err != nil {
			return 0, err
		}
		c.lease = lease
	}
	c.last = end
	return t, nil
}

// observe records a timestamp issued elsewhere (a replicated command's
// proposer): the clock never issues one at or before it.
func (c *clock) observe(t odata.DateTime) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t > c.last {
		c.last = t
	}
}

// lastIssued returns the newest timestamp issued, for Close to persist.
func (c *clock) lastIssued() odata.DateTime {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}
