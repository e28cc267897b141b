package odata

import (
	"sort"
	"strings"
)

// PositionKind says where a Position sits relative to the keys of the
// clustered index, ordered by (PartitionKey, RowKey) with byte-wise string
// order.
type PositionKind uint8

// The kinds of Position.
const (
	// Unbounded is minus infinity as a range start, plus infinity as an end.
	Unbounded PositionKind = iota
	// BeforeKey is just before the key (PartitionKey, RowKey). Since "" is
	// the smallest RowKey, BeforeKey(p, "") is before all of partition p.
	BeforeKey
	// AfterKey is just after the key (PartitionKey, RowKey).
	AfterKey
	// AfterPartition is after every key whose PartitionKey is PartitionKey
	// and before any larger PartitionKey; RowKey is unused.
	AfterPartition
)

// Position is a point between keys. Positions rather than keys make every
// bound exclusive-free: a range [Start, End) contains exactly the keys after
// Start and before End, whatever comparison produced the bound.
type Position struct {
	Kind         PositionKind
	PartitionKey string
	RowKey       string
}

// KeyRange is the set of keys between Start and End. The partition layer
// turns a Position into a storage key: BeforeKey(p, r) is the key of (p, r),
// AfterKey(p, r) that key's immediate successor, AfterPartition(p) the
// successor of the prefix of all of p's keys.
type KeyRange struct {
	Start, End Position
}

// FullRange is every key.
var FullRange = KeyRange{}

// IsFull reports whether r is unbounded on both sides (a table scan).
func (r KeyRange) IsFull() bool { return r.Start.Kind == Unbounded && r.End.Kind == Unbounded }

// Point reports whether r holds exactly one key, and which.
func (r KeyRange) Point() (pk, rk string, ok bool) {
	if r.Start.Kind == BeforeKey && r.End.Kind == AfterKey &&
		r.Start.PartitionKey == r.End.PartitionKey && r.Start.RowKey == r.End.RowKey {
		return r.Start.PartitionKey, r.Start.RowKey, true
	}
	return "", "", false
}

// Partition reports whether r lies within one partition, and which.
func (r KeyRange) Partition() (pk string, ok bool) {
	if r.Start.Kind == Unbounded || r.End.Kind == Unbounded || r.Start.PartitionKey != r.End.PartitionKey {
		return "", false
	}
	return r.Start.PartitionKey, true
}

// Contains reports whether the key (pk, rk) lies in r.
func (r KeyRange) Contains(pk, rk []byte) bool {
	if r.Start.Kind != Unbounded && cmpKeyPos(pk, rk, r.Start) < 0 {
		return false
	}
	if r.End.Kind != Unbounded && cmpKeyPos(pk, rk, r.End) >= 0 {
		return false
	}
	return true
}

// String renders r for tests and logs, e.g. [('a','x'), after 'a').
func (r KeyRange) String() string {
	return "[" + r.Start.describe("-inf") + ", " + r.End.describe("+inf") + ")"
}

func (p Position) describe(unbounded string) string {
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	switch p.Kind {
	case BeforeKey:
		return "(" + q(p.PartitionKey) + "," + q(p.RowKey) + ")"
	case AfterKey:
		return "(" + q(p.PartitionKey) + "," + q(p.RowKey) + ")+"
	case AfterPartition:
		return "after " + q(p.PartitionKey)
	}
	return unbounded
}

// cmpKeyPos compares the key (pk, rk) with a bounded position: negative when
// the key is before it.
func cmpKeyPos(pk, rk []byte, p Position) int {
	switch {
	case string(pk) < p.PartitionKey:
		return -1
	case string(pk) > p.PartitionKey:
		return 1
	}
	if p.Kind == AfterPartition {
		return -1
	}
	switch {
	case string(rk) < p.RowKey:
		return -1
	case string(rk) > p.RowKey:
		return 1
	}
	if p.Kind == AfterKey {
		return -1
	}
	return 1 // the key itself is after BeforeKey of itself
}

// cmpPos orders two bounded positions.
func cmpPos(a, b Position) int {
	if c := strings.Compare(a.PartitionKey, b.PartitionKey); c != 0 {
		return c
	}
	ca, cb := a.Kind == AfterPartition, b.Kind == AfterPartition
	switch {
	case ca && cb:
		return 0
	case ca:
		return 1
	case cb:
		return -1
	}
	if c := strings.Compare(a.RowKey, b.RowKey); c != 0 {
		return c
	}
	return int(a.Kind) - int(b.Kind) // BeforeKey < AfterKey
}

// cmpStarts orders range starts, Unbounded being minus infinity.
func cmpStarts(a, b Position) int {
	switch {
	case a.Kind == Unbounded && b.Kind == Unbounded:
		return 0
	case a.Kind == Unbounded:
		return -1
	case b.Kind == Unbounded:
		return 1
	}
	return cmpPos(a, b)
}

// cmpEnds orders range ends, Unbounded being plus infinity.
func cmpEnds(a, b Position) int {
	switch {
	case a.Kind == Unbounded && b.Kind == Unbounded:
		return 0
	case a.Kind == Unbounded:
		return 1
	case b.Kind == Unbounded:
		return -1
	}
	return cmpPos(a, b)
}

// startBeforeEnd reports whether a range from start to end is non-empty (or,
// for merging, whether start lies strictly before end).
func startBeforeEnd(start, end Position) bool {
	if start.Kind == Unbounded || end.Kind == Unbounded {
		return true
	}
	return cmpPos(start, end) < 0
}

func (r KeyRange) empty() bool { return !startBeforeEnd(r.Start, r.End) }

// Intersect returns the keys in both r and s, and false when there are
// none. The partition layer uses it to confine a query to the key range of
// a shared access signature.
func (r KeyRange) Intersect(s KeyRange) (KeyRange, bool) {
	x := r.intersect(s)
	return x, !x.empty()
}

// intersect returns r ∩ s (possibly empty).
func (r KeyRange) intersect(s KeyRange) KeyRange {
	out := r
	if cmpStarts(s.Start, out.Start) > 0 {
		out.Start = s.Start
	}
	if cmpEnds(s.End, out.End) < 0 {
		out.End = s.End
	}
	return out
}

// contains reports whether s ⊆ r.
func (r KeyRange) contains(s KeyRange) bool {
	return cmpStarts(r.Start, s.Start) <= 0 && cmpEnds(s.End, r.End) <= 0
}

// normalize sorts ranges, drops empty ones and merges those that overlap or
// touch, so that a union is a sorted list of disjoint ranges.
func normalize(rs []KeyRange) []KeyRange {
	out := rs[:0]
	for _, r := range rs {
		if !r.empty() {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return cmpStarts(out[i].Start, out[j].Start) < 0 })
	merged := out[:0]
	for _, r := range out {
		if n := len(merged); n > 0 && reaches(merged[n-1].End, r.Start) {
			// r starts at or before the previous end: one range.
			if cmpEnds(r.End, merged[n-1].End) > 0 {
				merged[n-1].End = r.End
			}
			continue
		}
		merged = append(merged, r)
	}
	return merged
}

// reaches reports whether a range ending at end touches or overlaps one
// starting at start (which sorts at or after the first range's start).
func reaches(end, start Position) bool {
	if end.Kind == Unbounded || start.Kind == Unbounded {
		return true
	}
	return cmpPos(start, end) <= 0
}

func intersectSets(a, b []KeyRange) []KeyRange {
	var out []KeyRange
	for _, r := range a {
		for _, s := range b {
			if x := r.intersect(s); !x.empty() {
				out = append(out, x)
			}
		}
	}
	return normalize(out)
}

func unionSets(a, b []KeyRange) []KeyRange {
	out := make([]KeyRange, 0, len(a)+len(b))
	out = append(out, a...)
	out = append(out, b...)
	return normalize(out)
}

// setContains reports whether every range of inner lies inside one range of
// outer.
func setContains(outer, inner []KeyRange) bool {
	for _, r := range inner {
		ok := false
		for _, o := range outer {
			if o.contains(r) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}
