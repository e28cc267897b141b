package partition

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/tabuladb/tabula/lsm"
)

// A table's two neighbouring ranges merge in three steps of three logs
// (docs/cluster.md, step 5). The system group's log gives the right
// range's keys to the left range's group in the catalog
// (MergeTableRange): routing sends them there from then on. The right
// group's own log freezes its span (FreezeGroupSpan): from that position
// on every replica of it refuses every write and read, and keeps its
// data. The left group's own log then takes the frozen span into its own
// (MergeGroupSpan), once every member of it holds the frozen span: the
// entities stay where they are, only the records change.

// MergeTableRange gives the range that follows range group group's in a
// table, which must start at PartitionKey at, to group: that range's
// descriptor goes, so routing sends its keys to group. A cluster's
// system group applies it to record a merge; the groups' own logs carry
// the merge of their spans (FreezeGroupSpan, MergeGroupSpan), which
// needs the right group's data on the left group's nodes. A table
// without that group is TableNotFound; a key that is not where the next
// range starts, or two ranges whose descriptors name different nodes, is
// InvalidInput.
func (s *Store) MergeTableRange(ctx context.Context, account, name string, group uint64, at string) error {
	return s.editGroups(ctx, account, name, group, func(gs []RangeGroup, i int) ([]RangeGroup, error) {
		if i+1 == len(gs) || gs[i+1].Start != at {
			return nil, serviceErrorf(CodeInvalidInput, "The merge is not valid.", "(no range starts at %q after group %d's)", at, group)
		}
		if !slices.Equal(slices.Sorted(slices.Values(gs[i].Voters)), slices.Sorted(slices.Values(gs[i+1].Voters))) {
			return nil, serviceErrorf(CodeInvalidInput, "The merge is not valid.", "(group %d is named on nodes %v, group %d on %v)",
				group, gs[i].Voters, gs[i+1].ID, gs[i+1].Voters)
		}
		return slices.Delete(gs, i+1, i+2), nil
	})
}

// FreezeGroupSpan freezes range group group's span: it holds no key from
// then on (GroupHolds), and its entities stay, for the group before it
// to take (MergeGroupSpan). It is the apply of the freeze command in the
// group's log (ctx's Stamp names it), and unlike other stamped writes it
// is synced with its applied index: a merge is proposed once every
// member of the group that takes the span says it holds it frozen, and
// the frozen group's log may be gone from its other nodes by then. A
// group without a span is TableNotFound; a frozen one stays frozen.
func (s *Store) FreezeGroupSpan(ctx context.Context, group uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	g, ok, err := s.groupSpanOf(group)
	switch {
	case err != nil:
		return err
	case !ok:
		return serviceError(CodeTableNotFound, msgTableNotFound)
	}
	g.frozen = true
	b := s.db.NewBatch()
	setGroupSpan(b, group, g)
	recordStamp(ctx, b)
	if err := s.commitSpans(b, s.syncWO, spanChange{group: group, g: g}); err != nil {
		return fmt.Errorf("partition: freeze the span of group %d: %w", group, err)
	}
	return nil
}

// GroupFrozen says whether range group group's span is frozen here.
func (s *Store) GroupFrozen(group uint64) (bool, error) {
	g, ok, err := s.groupSpanOf(group)
	return ok && g.frozen, err
}

// MergeGroupSpan makes range group left's span take the frozen span of
// group right, which starts at PartitionKey at, where left's ends: the
// apply of the merge command in left's log (ctx's Stamp names it), in
// the batch of left's applied index, synced, since the caller drops
// right's raft log next. Right's span record and applied index go; no
// entity moves. A right group that is not frozen here, not of left's
// table, or does not start at at, is ErrMergeUnready, which a replica
// must not go on from: it lacks the frozen group's data.
func (s *Store) MergeGroupSpan(ctx context.Context, left, right uint64, at string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l, ok, err := s.groupSpanOf(left)
	switch {
	case err != nil:
		return err
	case !ok:
		return serviceError(CodeTableNotFound, msgTableNotFound)
	case l.span.HighPartitionKey != at || l.frozen || right == left:
		return serviceErrorf(CodeInvalidInput, "The merge is not valid.", "(group %d's span [%q, %q) does not end at %q)",
			left, l.span.LowPartitionKey, l.span.HighPartitionKey, at)
	}
	r, ok, err := s.groupSpanOf(right)
	switch {
	case err != nil:
		return err
	case !ok || !r.frozen || r.tableID != l.tableID || r.span.LowPartitionKey != at:
		return fmt.Errorf("%w: group %d, to be merged into group %d at %q, is not frozen here (%+v)", ErrMergeUnready, right, left, at, r)
	}
	l.span.HighPartitionKey = r.span.HighPartitionKey
	l = l.withMerged(right)
	b := s.db.NewBatch()
	setGroupSpan(b, left, l)
	b.Delete(groupMetaKey(metaGroupSpan, right))
	b.Delete(groupMetaKey(metaGroupApplied, right))
	recordStamp(ctx, b)
	if err := s.commitSpans(b, s.syncWO, spanChange{group: left, g: l}, spanChange{group: right, deleted: true}); err != nil {
		return fmt.Errorf("partition: merge group %d into group %d: %w", right, left, err)
	}
	return nil
}

// ForgetGroup drops the span record and the applied index of a range
// group whose span another group of this store holds now (a snapshot of
// it brought the merged span), keeping every entity.
func (s *Store) ForgetGroup(group uint64) error {
	return s.ForgetGroups([]uint64{group})
}

// ForgetGroups is ForgetGroup for several groups, in one synced write: a
// system snapshot can leave a node many groups to forget at once.
func (s *Store) ForgetGroups(groups []uint64) error {
	if len(groups) == 0 {
		return nil
	}
	b := s.db.NewBatch()
	changes := make([]spanChange, len(groups))
	for i, g := range groups {
		b.Delete(groupMetaKey(metaGroupSpan, g))
		b.Delete(groupMetaKey(metaGroupApplied, g))
		changes[i] = spanChange{group: g, deleted: true}
	}
	if err := s.commitSpans(b, s.syncWO, changes...); err != nil {
		return fmt.Errorf("partition: forget groups %v: %w", groups, err)
	}
	return nil
}

// ErrMergeUnready is wrapped by MergeGroupSpan's refusal of a group that
// is not frozen here.
var ErrMergeUnready = fmt.Errorf("partition: the group to merge is not frozen")

// GroupSpanOf is a range group's span as this store records it.
type GroupSpanOf struct {
	Group  uint64
	Span   Span
	Frozen bool
}

// SpanRecorded says whether range group group's span is recorded here:
// a group started by a split, or given a snapshot; not a range the
// catalog names that no log here has started.
func (s *Store) SpanRecorded(group uint64) (bool, error) {
	_, recorded, err := s.spanRecord(group)
	return recorded, err
}

// GroupMerged returns the groups whose spans range group group's span
// took in merges, oldest first, the latest MaxMergedRecorded: as its log
// merged them here, or as the span snapshot it last ingested had them
// (nil for none). A node whose replica of group is past a merge holds
// the merged group's frozen span only as a leftover: no log of the node
// will merge it again. The slice is the cached record's: the caller must
// not change it.
func (s *Store) GroupMerged(group uint64) ([]uint64, error) {
	g, _, err := s.spanRecord(group)
	return g.merged, err
}

// MergeThresholds returns when two neighbouring ranges are cold enough to
// merge, as the store merges its own range partitions: below this many
// reads and writes a second each, and together smaller than this many
// bytes (Options.SplitOpsPerSecond/10, Options.MergeBytes).
func (s *Store) MergeThresholds() (opsPerSecond float64, bytes int64) {
	return s.opts.SplitOpsPerSecond / 10, s.opts.MergeBytes
}

// scanGroupSpans hands fn every span record, by group.
func (s *Store) scanGroupSpans(fn func(group uint64, g groupSpan) error) error {
	lo := groupMetaKey(metaGroupSpan, 0)
	return s.scan(lo, []byte{nsMeta, metaGroupSpan + 1}, func(k, v []byte) error {
		if len(k) != len(lo) {
			return fmt.Errorf("partition: span record key %x: %w", k, lsm.ErrCorruption)
		}
		g, err := decodeGroupSpan(v)
		if err != nil {
			return err
		}
		return fn(binary.BigEndian.Uint64(k[2:]), g)
	})
}

// SpanHolders returns the range groups other than group that hold keys
// of span sp of a live table in this store, by id: those whose span
// record lies over a part of it, and the table's first group when it has
// no record. Which of them are live (hosted, or kept frozen for a merge)
// is the caller's to say.
func (s *Store) SpanHolders(group uint64, sp Span) ([]GroupSpanOf, error) {
	t, err := s.acquireTable(sp.Account, sp.Table)
	if IsCode(err, CodeTableNotFound) {
		return nil, nil // of a dropped table
	}
	if err != nil {
		return nil, err
	}
	defer t.release()
	holders, err := s.spanHolders(t, group, sp)
	slices.SortFunc(holders, func(a, b GroupSpanOf) int { return cmp.Compare(a.Group, b.Group) })
	return holders, err
}

// spanHolders returns the groups other than group that hold keys of span
// sp of table t, in no order. A table's first group without a record
// never split here: it holds the whole table (as GroupSpan says). Any
// other group without one never held anything here (groupSpanOf), and
// empties its span before it starts.
func (s *Store) spanHolders(t *table, group uint64, sp Span) ([]GroupSpanOf, error) {
	var holders []GroupSpanOf
	if gs := t.rangeGroups(); len(gs) > 0 && gs[0].ID != group && gs[0].Start == "" {
		recorded, err := s.SpanRecorded(gs[0].ID)
		if err != nil {
			return nil, err
		}
		if !recorded {
			holders = append(holders, GroupSpanOf{Group: gs[0].ID, Span: Span{Account: t.account, Table: t.name}})
		}
	}
	err := s.scanGroupSpans(func(g uint64, gs groupSpan) error {
		if g != group && gs.tableID == t.id && sp.overlaps(gs.span) {
			holders = append(holders, GroupSpanOf{Group: g, Span: gs.span, Frozen: gs.frozen})
		}
		return nil
	})
	return holders, err
}

// OutsideCatalog lists the range groups whose span this store records,
// of a live table, that its catalog no longer names: merged away
// (MergeTableRange), their span not taken yet by the group before them.
// A group whose span a split gives it before the catalog names it is
// listed too, until the system group's record of the split is applied.
func (s *Store) OutsideCatalog() ([]GroupSpanOf, error) {
	var out []GroupSpanOf
	err := s.scanGroupSpans(func(group uint64, g groupSpan) error {
		t, err := s.acquireTable(g.span.Account, g.span.Table)
		if IsCode(err, CodeTableNotFound) {
			return nil // of a dropped table
		}
		if err != nil {
			return err
		}
		live := t.id == g.tableID
		t.release()
		if !live {
			return nil // of a dropped table
		}
		switch _, named, err := s.GroupTable(group); {
		case err != nil:
			return err
		case !named:
			out = append(out, GroupSpanOf{Group: group, Span: g.span, Frozen: g.frozen})
		}
		return nil
	})
	return out, err
}
