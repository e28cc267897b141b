package partition

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/tabuladb/tabula/lsm"
)

// A range group's span is the PartitionKeys of its table whose entities
// its log writes. Unlike the catalog's descriptors, which the system
// group's log changes and routing reads, the span is changed by the
// group's own log only, at one position of it on every replica: when the
// group splits (SplitGroupSpan), and when a replica takes a span
// snapshot (IngestSpan). So every replica of the group refuses the same
// writes (GroupHolds), whatever it has applied of the system group: the
// record names its table itself, since a replica may apply a split, and
// its child's writes, before it applies the system group's record of the
// split. A table's first group that has no record holds its whole table:
// it never split, and its table's creation precedes all its entries. (A
// replica of any other group has a record, from the split that started
// it or from a snapshot.)

// The first byte of a span record: version 1; version 2, which is
// version 1 followed by a flags byte, written only for a frozen span so
// that every other record reads as before; or version 3, version 2
// followed by the groups the span merged, written only for a span that
// merged one.
const (
	groupSpanVersion        = 1
	groupSpanFlaggedVersion = 2
	groupSpanMergedVersion  = 3
	groupSpanFrozen         = 1 // flag: the span takes no write (FreezeGroupSpan)
)

// MaxMergedRecorded is how many of the groups a span merged its record
// keeps, the latest: a node holds a group merged away only while its
// replica of the merging group lags that merge, and a replica more than
// sixteen merges behind is left to the ways of finding a leftover that
// need no record (docs/cluster.md).
const MaxMergedRecorded = 16

// groupSpan is a group's span, with its table's id.
type groupSpan struct {
	tableID uint64
	span    Span
	frozen  bool
	// merged are the groups whose spans this group's own log merged
	// (MergeGroupSpan), oldest first, at most MaxMergedRecorded: a node
	// whose replica of this group is past those merges holds nothing of
	// those groups that a merge will take. Not the merged groups' own
	// lists: a group merged by one that this group merged later may still
	// be for a lagging replica of that one to merge.
	merged []uint64
}

// withMerged returns g having merged group right: g's list, then right,
// the latest MaxMergedRecorded of them. A new slice: the cached record is
// shared.
func (g groupSpan) withMerged(right uint64) groupSpan {
	merged := append(slices.Clone(g.merged), right)
	g.merged = merged[max(0, len(merged)-MaxMergedRecorded):]
	return g
}

// encodeGroupSpan encodes a span record: version | uvarint table id |
// account | table name | low | high ("" for unbounded), each string as
// uvarint length and bytes | (versions 2 and 3) flags | (version 3)
// uvarint count of merged groups, then each group id as a uvarint.
func encodeGroupSpan(g groupSpan) []byte {
	version := byte(groupSpanVersion)
	switch {
	case len(g.merged) > 0:
		version = groupSpanMergedVersion
	case g.frozen:
		version = groupSpanFlaggedVersion
	}
	v := binary.AppendUvarint([]byte{version}, g.tableID)
	for _, s := range []string{g.span.Account, g.span.Table, g.span.LowPartitionKey, g.span.HighPartitionKey} {
		v = binary.AppendUvarint(v, uint64(len(s)))
		v = append(v, s...)
	}
	if version >= groupSpanFlaggedVersion {
		var flags byte
		if g.frozen {
			flags = groupSpanFrozen
		}
		v = append(v, flags)
	}
	if version == groupSpanMergedVersion {
		v = appendGroupIDs(v, g.merged)
	}
	return v
}

func decodeGroupSpan(v []byte) (groupSpan, error) {
	var g groupSpan
	if len(v) == 0 || v[0] < groupSpanVersion || v[0] > groupSpanMergedVersion {
		return g, fmt.Errorf("partition: group span record: bad version: %w", lsm.ErrCorruption)
	}
	version := v[0]
	id, n := binary.Uvarint(v[1:])
	if n <= 0 || id == 0 {
		return g, fmt.Errorf("partition: group span record: bad table id: %w", lsm.ErrCorruption)
	}
	g.tableID, v = id, v[1+n:]
	for _, dst := range []*string{&g.span.Account, &g.span.Table, &g.span.LowPartitionKey, &g.span.HighPartitionKey} {
		l, n := binary.Uvarint(v)
		if n <= 0 || l > uint64(len(v)-n) {
			return groupSpan{}, fmt.Errorf("partition: group span record: cut: %w", lsm.ErrCorruption)
		}
		*dst, v = string(v[n:n+int(l)]), v[n+int(l):]
	}
	if version >= groupSpanFlaggedVersion {
		switch {
		case len(v) == 0:
			return groupSpan{}, fmt.Errorf("partition: group span record: no flags: %w", lsm.ErrCorruption)
		case v[0] == groupSpanFrozen:
			g.frozen = true
		case v[0] != 0 || version == groupSpanFlaggedVersion:
			// Version 2 is written for a frozen span only.
			return groupSpan{}, fmt.Errorf("partition: group span record: unknown flags %#x: %w", v[0], lsm.ErrCorruption)
		}
		v = v[1:]
	}
	if version == groupSpanMergedVersion {
		var err error
		if g.merged, v, err = readGroupIDsFrom(v); err != nil {
			return groupSpan{}, fmt.Errorf("partition: group span record: merged groups: %w", lsm.ErrCorruption)
		}
	}
	if len(v) != 0 || g.span.check() != nil {
		return groupSpan{}, fmt.Errorf("partition: group span record: empty span or trailing bytes: %w", lsm.ErrCorruption)
	}
	return g, nil
}

// appendGroupIDs appends a list of at most MaxMergedRecorded group ids:
// uvarint count, then each id as a uvarint.
func appendGroupIDs(dst []byte, ids []uint64) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(ids)))
	for _, id := range ids {
		dst = binary.AppendUvarint(dst, id)
	}
	return dst
}

// errBadGroupIDs is the refusal of a list of group ids.
var errBadGroupIDs = errors.New("a list of group ids empty, cut, too long, or naming group 0")

// readGroupIDs reads a list appendGroupIDs wrote, of at least one id:
// from a record's bytes, or from a span stream (whose reader sums what
// it hands out).
func readGroupIDs(r io.ByteReader) ([]uint64, error) {
	count, err := binary.ReadUvarint(r)
	if err != nil || count == 0 || count > MaxMergedRecorded {
		return nil, errBadGroupIDs
	}
	ids := make([]uint64, count)
	for i := range ids {
		if ids[i], err = binary.ReadUvarint(r); err != nil || ids[i] == 0 {
			return nil, errBadGroupIDs
		}
	}
	return ids, nil
}

// readGroupIDsFrom is readGroupIDs from the front of v; it returns the
// rest of v.
func readGroupIDsFrom(v []byte) ([]uint64, []byte, error) {
	r := bytes.NewReader(v)
	ids, err := readGroupIDs(r)
	return ids, v[len(v)-r.Len():], err
}

// setGroupSpan adds to b the record of a group's span; b is written by
// commitSpans, which caches the record (span_cache.go).
func setGroupSpan(b *lsm.Batch, group uint64, g groupSpan) {
	b.Set(groupMetaKey(metaGroupSpan, group), encodeGroupSpan(g))
}

// groupSpanOf returns group's span: its record, or, without one, its
// whole table as the catalog has it; ok is false for a group with
// neither.
func (s *Store) groupSpanOf(group uint64) (groupSpan, bool, error) {
	g, recorded, err := s.spanRecord(group)
	if recorded || err != nil {
		return g, recorded, err
	}
	// No record. The span is derived, not cached, for a split writes the
	// record, which then rules. A table's first group without one never
	// split: it holds the whole table (whatever split the catalog has
	// recorded and its log not made yet). Any other group without one
	// is a range this store never held: its range as the catalog has it.
	t, ok, err := s.acquireGroupTable(group)
	if !ok || err != nil {
		return groupSpan{}, false, err
	}
	defer t.release()
	g = groupSpan{tableID: t.id, span: Span{Account: t.account, Table: t.name}}
	gs := t.rangeGroups()
	if i := slices.IndexFunc(gs, func(g RangeGroup) bool { return g.ID == group }); i > 0 {
		g.span = t.tableGroup(gs, i).Span()
	}
	return g, true, nil
}

// GroupSpan returns the span of range group group as its log has set it
// on this store: its table and the PartitionKeys it holds. ok is false
// for a group this store knows nothing of.
func (s *Store) GroupSpan(group uint64) (sp Span, ok bool, err error) {
	g, ok, err := s.groupSpanOf(group)
	return g.span, ok, err
}

// GroupHolds reports whether range group group's span is of table
// account/name (the live table of that name, not one dropped before it),
// and whether it holds PartitionKey pk of it: the same answers on every
// replica at the same position of the group's log. A frozen span holds
// no key.
func (s *Store) GroupHolds(group uint64, account, name, pk string) (table, key bool, err error) {
	t, err := s.acquireTable(account, name)
	if IsCode(err, CodeTableNotFound) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	defer t.release()
	g, ok, err := s.groupSpanOf(group)
	if !ok || err != nil || g.tableID != t.id {
		return false, false, err
	}
	return true, !g.frozen && g.span.Contains(pk), nil
}

// SplitGroupSpan splits range group parent's span at PartitionKey at: the
// parent keeps the keys below it, and group child holds those from at to
// the parent's old end. It is the apply of the split command in the
// parent's log (ctx's Stamp names it), so the spans change at the same
// position of that log on every replica, in the batch of the parent's
// applied index; no entity moves. The child's applied index starts at
// the split's own index, where its log starts (GroupStartIndex when ctx
// has no Stamp). A key that is not strictly inside the parent's span is
// InvalidInput.
func (s *Store) SplitGroupSpan(ctx context.Context, parent, child uint64, at string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	g, ok, err := s.groupSpanOf(parent)
	switch sp := g.span; {
	case err != nil:
		return err
	case !ok:
		return serviceError(CodeTableNotFound, msgTableNotFound)
	case at <= sp.LowPartitionKey || (sp.HighPartitionKey != "" && at >= sp.HighPartitionKey) || child == 0 || child == parent:
		return serviceErrorf(CodeInvalidInput, "The split is not valid.", "(%q in group %d's span [%q, %q))", at, parent, sp.LowPartitionKey, sp.HighPartitionKey)
	case slices.Contains(g.merged, child):
		// A split that would make the child again, proposed from a
		// catalog older than this group's merge of it. A leader waits
		// for its catalog to catch up before it splits (the cluster's
		// catalogCaughtUp); this is every replica's backstop, alike on
		// each: born twice, the child would be frozen and merged twice,
		// and a node that read the record would drop the second one as
		// a leftover before this group merged it again.
		return serviceErrorf(CodeInvalidInput, "The split is not valid.", "(group %d merged group %d already)", parent, child)
	}
	low, high := g, g
	low.span.HighPartitionKey, high.span.LowPartitionKey = at, at
	// The parent's merges stay in its record; the child's log starts
	// after them, at the split.
	high.merged = nil
	b := s.db.NewBatch()
	setGroupSpan(b, parent, low)
	setGroupSpan(b, child, high)
	start := uint64(GroupStartIndex)
	if st, ok := stampOf(ctx); ok {
		start = st.Index
	}
	setAppliedIndex(b, child, start)
	// The child first: the cache is read without a lock (a read's
	// GroupHolds, on a request's goroutine), and between the two stores
	// a lookup of either group then finds the keys past at held, never
	// by neither. (What must see a split whole, spansGivenUp, scans the
	// store.)
	if err := s.commitSpans(b, s.writeOptions(ctx, b), spanChange{group: child, g: high}, spanChange{group: parent, g: low}); err != nil {
		return fmt.Errorf("partition: split group %d at %q: %w", parent, at, err)
	}
	return nil
}
