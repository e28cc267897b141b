package partition

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tabuladb/tabula/lsm"
)

// RangeInfo describes one range partition of a table: the PartitionKeys in
// [StartPartitionKey, EndPartitionKey) ("" = unbounded), how many entities
// and bytes (keys plus stored values) it holds, and its smoothed load.
type RangeInfo struct {
	StartPartitionKey, EndPartitionKey string
	Entities, Bytes                    int64
	ReadsPerSecond, WritesPerSecond    float64
}

// rangeState is one range partition with its live statistics.
type rangeState struct {
	start, end string // [start, end); end "" is unbounded

	entities, bytes atomic.Int64
	reads, writes   atomic.Int64  // operations since the last tick
	readRate        atomic.Uint64 // float64 bits: smoothed reads per second
	writeRate       atomic.Uint64 // float64 bits: smoothed writes per second

	// Owned by the maintenance goroutine.
	born  int64 // tick the range was made
	retry int64 // no split attempt before this tick

	// While a scan recounts the range (split, recount), writers also log
	// their deltas, so the counts can be made exact for the scan's
	// snapshot plus everything after it. tracking is flipped only with
	// table.mu held exclusively and read with it held shared.
	tracking bool
	trackMu  sync.Mutex
	deltas   []statDelta
}

type statDelta struct {
	pk              string
	entities, bytes int64
}

func (r *rangeState) load() float64 {
	return math.Float64frombits(r.readRate.Load()) + math.Float64frombits(r.writeRate.Load())
}

func (r *rangeState) info() RangeInfo {
	return RangeInfo{
		StartPartitionKey: r.start,
		EndPartitionKey:   r.end,
		Entities:          r.entities.Load(),
		Bytes:             r.bytes.Load(),
		ReadsPerSecond:    math.Float64frombits(r.readRate.Load()),
		WritesPerSecond:   math.Float64frombits(r.writeRate.Load()),
	}
}

// findRange returns the range of rs holding partition pk.
func findRange(rs []*rangeState, pk string) *rangeState {
	i := sort.Search(len(rs), func(i int) bool { return rs[i].start > pk })
	return rs[i-1] // rs[0].start == "" <= every pk
}

// findRangeBytes is findRange for a key read from storage; the conversions
// in the comparisons do not allocate.
func findRangeBytes(rs []*rangeState, pk []byte) *rangeState {
	i := sort.Search(len(rs), func(i int) bool { return rs[i].start > string(pk) })
	return rs[i-1]
}

// recordWrite accounts a committed write of n operations on partition pk.
// The caller holds t.mu shared from before it enqueued the commit until
// now, across the wait for durability: a scan (beginScan, endScan, which
// take t.mu exclusively) thus never starts or ends between a write
// becoming visible and its accounting, so each write is either in the
// scan's snapshot or in its logged deltas, never both or neither. (Taking
// t.mu only again after the wait would let a write that was visible at
// the snapshot be logged as a delta too.) Holding t.mu shared costs the
// writers nothing; a split or merge waits for the writes in flight.
func (t *table) recordWrite(pk string, n, dEntities, dBytes int64) {
	r := findRange(t.rangeList(), pk)
	r.entities.Add(dEntities)
	r.bytes.Add(dBytes)
	r.writes.Add(n)
	if !t.dirty.Load() {
		t.dirty.Store(true)
	}
	if r.tracking {
		r.trackMu.Lock()
		r.deltas = append(r.deltas, statDelta{pk, dEntities, dBytes})
		r.trackMu.Unlock()
	}
}

// recordRead accounts n reads of partition pk (approximate: a read racing a
// split may count on the range being replaced).
func (t *table) recordRead(pk string, n int64) {
	findRange(t.rangeList(), pk).reads.Add(n)
}

// Range map value (docs/keys.md): version 1 | uvarint count | count ×
// (uvarint start length | start | varint entities | varint bytes). Each
// range ends where the next starts; the last is unbounded.
const rangeMapVersion = 1

func encodeRangeMap(rs []*rangeState) []byte {
	v := []byte{rangeMapVersion}
	v = binary.AppendUvarint(v, uint64(len(rs)))
	for _, r := range rs {
		v = binary.AppendUvarint(v, uint64(len(r.start)))
		v = append(v, r.start...)
		v = binary.AppendVarint(v, r.entities.Load())
		v = binary.AppendVarint(v, r.bytes.Load())
	}
	return v
}

func decodeRangeMap(v []byte) ([]*rangeState, error) {
	bad := func(what string) error {
		return fmt.Errorf("partition: range map: %s: %w", what, lsm.ErrCorruption)
	}
	if len(v) < 1 || v[0] != rangeMapVersion {
		return nil, bad("bad version")
	}
	v = v[1:]
	n, k := binary.Uvarint(v)
	if k <= 0 || n == 0 || n > uint64(len(v)) {
		return nil, bad("bad count")
	}
	v = v[k:]
	rs := make([]*rangeState, 0, n)
	for i := uint64(0); i < n; i++ {
		l, k := binary.Uvarint(v)
		if k <= 0 || l > uint64(len(v)-k) {
			return nil, bad("bad start")
		}
		r := &rangeState{start: string(v[k : k+int(l)])}
		v = v[k+int(l):]
		e, k1 := binary.Varint(v)
		if k1 <= 0 {
			return nil, bad("bad entity count")
		}
		b, k2 := binary.Varint(v[k1:])
		if k2 <= 0 {
			return nil, bad("bad byte count")
		}
		v = v[k1+k2:]
		r.entities.Store(e)
		r.bytes.Store(b)
		if i == 0 && r.start != "" || i > 0 && r.start <= rs[i-1].start {
			return nil, bad("starts out of order")
		}
		if i > 0 {
			rs[i-1].end = r.start
		}
		rs = append(rs, r)
	}
	if len(v) != 0 {
		return nil, bad("trailing bytes")
	}
	return rs, nil
}

// rangeMapCount returns the number of ranges of an encoded range map.
func rangeMapCount(v []byte) (int64, error) {
	if len(v) < 1 || v[0] != rangeMapVersion {
		return 0, fmt.Errorf("partition: range map: bad version: %w", lsm.ErrCorruption)
	}
	n, k := binary.Uvarint(v[1:])
	if k <= 0 || n == 0 || n > uint64(len(v)) {
		return 0, fmt.Errorf("partition: range map: bad count: %w", lsm.ErrCorruption)
	}
	return int64(n), nil
}

// loadRanges reads the range map of a table being opened. A missing map
// (which a crash between catalog edits cannot produce, but an old store
// might) becomes one range, recounted by the maintenance goroutine.
func (s *Store) loadRanges(t *table) ([]*rangeState, error) {
	v, err := s.db.Get(idKey(nsRanges, t.id))
	if errors.Is(err, lsm.ErrNotFound) {
		t.recountDue.Store(true)
		return []*rangeState{{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("partition: read range map of table %d: %w", t.id, err)
	}
	rs, err := decodeRangeMap(v)
	if err != nil {
		return nil, fmt.Errorf("table %d: %w", t.id, err)
	}
	return rs, nil
}

// Ranges returns the table's range partitions in key order.
func (s *Store) Ranges(ctx context.Context, account, tableName string) ([]RangeInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t, err := s.acquireTable(account, tableName)
	if err != nil {
		return nil, err
	}
	defer t.release()
	rs := t.rangeList()
	out := make([]RangeInfo, len(rs))
	for i, r := range rs {
		out[i] = r.info()
	}
	return out, nil
}

// rateTau is the time constant of the load averages: a load change shows
// at 63% after rateTau.
const rateTau = 2 * time.Second

// updateRates folds the operations counted since the last tick into the
// smoothed rates.
func (t *table) updateRates(elapsed time.Duration) {
	if elapsed <= 0 {
		return
	}
	alpha := 1 - math.Exp(-float64(elapsed)/float64(rateTau))
	secs := elapsed.Seconds()
	for _, r := range t.rangeList() {
		for _, p := range [...]struct {
			count *atomic.Int64
			rate  *atomic.Uint64
		}{{&r.reads, &r.readRate}, {&r.writes, &r.writeRate}} {
			inst := float64(p.count.Swap(0)) / secs
			old := math.Float64frombits(p.rate.Load())
			p.rate.Store(math.Float64bits(old + alpha*(inst-old)))
		}
	}
}

// bounds returns the storage key range of the partitions [start, end).
func (t *table) bounds(start, end string) (lo, hi []byte) {
	lo = append([]byte(nil), t.prefix...)
	if start != "" {
		lo = appendEscaped(lo, start)
	}
	if end == "" {
		hi = prefixSuccessor(t.prefix)
	} else {
		hi = appendEscaped(append([]byte(nil), t.prefix...), end)
	}
	return lo, hi
}

// beginScan takes a snapshot of r for a recount and starts logging writes
// to r. It returns nil if r is no longer one of t's ranges.
func (s *Store) beginScan(t *table, r *rangeState) *lsm.Snapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.hasRange(r) {
		return nil
	}
	r.tracking = true
	return s.db.NewSnapshot()
}

// endScan stops logging writes to r and returns what was logged. The
// caller holds t.mu exclusively.
func endScan(r *rangeState) []statDelta {
	r.tracking = false
	r.trackMu.Lock()
	d := r.deltas
	r.deltas = nil
	r.trackMu.Unlock()
	return d
}

func (t *table) hasRange(r *rangeState) bool {
	for _, x := range t.rangeList() {
		if x == r {
			return true
		}
	}
	return false
}

// countRange counts the entities and bytes of r at snap, also reporting
// whether r holds more than one partition.
func (s *Store) countRange(snap *lsm.Snapshot, t *table, r *rangeState) (entities, size int64, multi bool, err error) {
	lo, hi := t.bounds(r.start, r.end)
	it := snap.NewIter(&lsm.IterOptions{LowerBound: lo, UpperBound: hi})
	var first []byte
	n := len(t.prefix)
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		entities++
		size += int64(len(k) + len(it.Value()))
		if !multi {
			pk, _ := readEscaped(k, n, nil)
			if first == nil {
				first = append([]byte{}, pk...)
			} else if string(pk) != string(first) {
				multi = true
			}
		}
	}
	if err := it.Close(); err != nil {
		return 0, 0, false, fmt.Errorf("partition: count range of table %d: %w", t.id, err)
	}
	return entities, size, multi, nil
}

// recount makes r's entity and byte counts exact again (after a crash lost
// the counts recorded since they were last persisted).
func (s *Store) recount(t *table, r *rangeState) error {
	snap := s.beginScan(t, r)
	if snap == nil {
		return nil
	}
	defer snap.Close()
	entities, size, _, err := s.countRange(snap, t, r)
	t.mu.Lock()
	defer t.mu.Unlock()
	deltas := endScan(r)
	if err != nil {
		return err
	}
	for _, d := range deltas {
		entities += d.entities
		size += d.bytes
	}
	r.entities.Store(entities)
	r.bytes.Store(size)
	t.dirty.Store(true)
	return nil
}

// splitCooldown is how many ticks a new range waits before a load split,
// so that a split decided on a load average does not cascade before the
// halves have been measured; a range found to hold one partition waits 12
// times as long before the next attempt.
const splitCooldown = 5

// split divides r at a PartitionKey boundary near its byte midpoint. The
// halves' counts are exact: scanned at a snapshot, plus the writes logged
// since. A range holding a single partition cannot split.
func (s *Store) split(t *table, r *rangeState) (bool, error) {
	snap := s.beginScan(t, r)
	if snap == nil {
		return false, nil
	}
	defer snap.Close()
	total, totalBytes, multi, err := s.countRange(snap, t, r)
	var at string
	var leftN, leftBytes int64
	if err == nil && multi {
		at, leftN, leftBytes, err = s.findSplit(snap, t, r, totalBytes)
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	deltas := endScan(r)
	if err != nil {
		return false, err
	}
	if at == "" {
		// One partition: recount, and leave it alone for a while.
		for _, d := range deltas {
			total += d.entities
			totalBytes += d.bytes
		}
		r.entities.Store(total)
		r.bytes.Store(totalBytes)
		t.dirty.Store(true)
		r.retry = s.tick.Load() + splitCooldown*12
		return false, nil
	}
	left := &rangeState{start: r.start, end: at, born: s.tick.Load()}
	right := &rangeState{start: at, end: r.end, born: s.tick.Load()}
	left.entities.Store(leftN)
	left.bytes.Store(leftBytes)
	right.entities.Store(total - leftN)
	right.bytes.Store(totalBytes - leftBytes)
	for _, d := range deltas {
		h := right
		if d.pk < at {
			h = left
		}
		h.entities.Add(d.entities)
		h.bytes.Add(d.bytes)
	}
	// The halves inherit half the load each until they are measured.
	for _, h := range []*rangeState{left, right} {
		h.readRate.Store(math.Float64bits(math.Float64frombits(r.readRate.Load()) / 2))
		h.writeRate.Store(math.Float64bits(math.Float64frombits(r.writeRate.Load()) / 2))
	}
	old := t.rangeList()
	next := make([]*rangeState, 0, len(old)+1)
	for _, x := range old {
		if x == r {
			next = append(next, left, right)
		} else {
			next = append(next, x)
		}
	}
	if err := s.installRanges(t, next); err != nil {
		// r stays; its counters saw every write, deltas included.
		return false, err
	}
	s.counters.splits.Add(1)
	return true, nil
}

// findSplit picks the split point of r: of the two PartitionKey boundaries
// around the byte midpoint (the start of the partition holding it, unless
// that is r's first partition, and the start of the next one), the nearer.
// It returns the PartitionKey the right half starts at ("" if none) and the
// left half's counts.
func (s *Store) findSplit(snap *lsm.Snapshot, t *table, r *rangeState, total int64) (string, int64, int64, error) {
	type boundary struct {
		pk       string
		n, bytes int64 // the counts before it
		ok       bool
	}
	var before, after boundary
	lo, hi := t.bounds(r.start, r.end)
	it := snap.NewIter(&lsm.IterOptions{LowerBound: lo, UpperBound: hi})
	half := total / 2
	var cur []byte // the partition being read
	var n, size int64
	midFound := false
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		pk, _ := readEscaped(k, len(t.prefix), nil)
		if n == 0 || string(pk) != string(cur) {
			b := boundary{pk: string(pk), n: n, bytes: size, ok: n > 0}
			if midFound {
				after = b
				break
			}
			before = b // r's first partition gives ok == false
			cur = append(cur[:0], pk...)
		}
		size += int64(len(k) + len(it.Value()))
		n++
		midFound = midFound || size >= half
	}
	if err := it.Close(); err != nil {
		return "", 0, 0, fmt.Errorf("partition: find split of table %d: %w", t.id, err)
	}
	dist := func(b int64) int64 { return max(b-half, half-b) }
	switch {
	case before.ok && (!after.ok || dist(before.bytes) <= dist(after.bytes)):
		return before.pk, before.n, before.bytes, nil
	case after.ok:
		return after.pk, after.n, after.bytes, nil
	}
	return "", 0, 0, nil
}

// merge joins t's adjacent ranges i and i+1.
func (s *Store) merge(t *table, i int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.rangeList()
	a, b := old[i], old[i+1]
	m := &rangeState{start: a.start, end: b.end, born: s.tick.Load()}
	m.entities.Store(a.entities.Load() + b.entities.Load())
	m.bytes.Store(a.bytes.Load() + b.bytes.Load())
	m.readRate.Store(math.Float64bits(math.Float64frombits(a.readRate.Load()) + math.Float64frombits(b.readRate.Load())))
	m.writeRate.Store(math.Float64bits(math.Float64frombits(a.writeRate.Load()) + math.Float64frombits(b.writeRate.Load())))
	next := make([]*rangeState, 0, len(old)-1)
	next = append(next, old[:i]...)
	next = append(next, m)
	next = append(next, old[i+2:]...)
	if err := s.installRanges(t, next); err != nil {
		return err
	}
	s.counters.merges.Add(1)
	return nil
}

// installRanges persists a new range map and then makes it current. The
// caller holds t.mu exclusively, so no write is between commit and stats.
func (s *Store) installRanges(t *table, next []*rangeState) error {
	if !t.deleted.Load() {
		if err := s.db.Set(idKey(nsRanges, t.id), encodeRangeMap(next), s.syncWO); err != nil {
			return fmt.Errorf("partition: persist range map of table %d: %w", t.id, err)
		}
	}
	old := t.ranges.Swap(&next)
	if !t.deleted.Load() { // else the drop took its ranges off the count
		s.counters.ranges.Add(int64(len(next) - len(*old)))
	}
	return nil
}
