package partition

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/odata"
)

// A span snapshot is one key span of one table (the entities of a range
// partition) with the applied index of the raft group that replicates it,
// as one stream (docs/snapshot.md, "Span snapshots"): a range group's
// replica that fell behind its peers' logs is caught up from the data of
// its span, not from the whole store.
//
// The stream carries entities by (PartitionKey, RowKey), not by engine
// key, so it does not depend on the table id either store gave the table.
//
// Ingesting one replaces the span's entities in an open store. The span
// may be larger than any engine batch should be (ranges split only
// between partitions, so one partition can make a range of any size),
// so the ingest cannot be one batch; and a stream is checked
// only at its end, so the span cannot be cleared before the stream has
// checked out, or a cut stream would leave it empty. The ingest therefore
// works in two phases:
//
//  1. Stage: the stream's entities are written under the staging
//     namespace (nsStaged | group | esc(pk) | esc(rk)), unsynced. The span
//     is not touched: a refused stream, or a crash, leaves it as it was,
//     and the staged pairs are deleted (by the refusal, or at the next
//     Open).
//  2. Move: once the stream has checked out, a marker (meta
//     metaSpanIngest | group) naming the span is written synced, which
//     also makes the staged pairs durable; then the span's entities are
//     deleted, the staged ones copied into it, and the group's applied
//     index set and the marker deleted in one synced batch; the staged
//     pairs are deleted last. Every step of the move is idempotent given
//     the staged pairs, so Open, finding a marker left by a crash, does
//     the move again before the store serves anything (and a move that
//     failed on a storage error is done again by the group's next ingest
//     or the next Open).
//
// A crash thus leaves the old span or the new one, never a mix. While a
// move runs, the table's writes wait (it holds the table's lock), but
// reads are not held off: the caller must not serve the span while it
// ingests it, as a replica installing a snapshot does not.

// spanSnapshotMagic opens every span stream of format version 1; version
// 2 (spanSnapshotMergedMagic), which also carries the groups the span
// merged, is written only for a span that merged one, so that a stream
// of any other reads as before.
var (
	spanSnapshotMagic       = []byte("TBLSPAN\x01")
	spanSnapshotMergedMagic = []byte("TBLSPAN\x02")
)

// Record tags of a span stream: each entity is preceded by
// spanRecordEntity, and spanRecordEnd ends the entities (a PartitionKey
// or RowKey may be empty, so a zero length cannot end them as it does a
// store stream).
const (
	spanRecordEnd    = 0x00
	spanRecordEntity = 0x01
)

// spanIngestBatchBytes bounds the engine batches of an ingest, so that a
// span of any size moves with bounded memory.
const spanIngestBatchBytes = 1 << 20

// ErrBadSpanSnapshot is wrapped by every refusal of a span snapshot
// stream: cut, damaged, out of order, outside its span, or of another
// span or group than the one ingested.
var ErrBadSpanSnapshot = errors.New("partition: bad span snapshot")

// ErrSpanChanged is returned by SnapshotGroupSpan when the group's span record
// at the view's instant is not the span asked for, or is frozen: a split,
// freeze or merge of the group applied since the caller read its span.
// The caller reads the span again and retries.
var ErrSpanChanged = errors.New("partition: the group's span changed")

// Span is a key span of one table: the entities of table Table of
// Account whose PartitionKey is in [LowPartitionKey, HighPartitionKey),
// a HighPartitionKey of "" meaning to the end of the table (so the span
// {"", ""} is the whole table). Table names are case-insensitive.
type Span struct {
	Account, Table                    string
	LowPartitionKey, HighPartitionKey string
}

// Contains reports whether PartitionKey pk is in the span.
func (sp Span) Contains(pk string) bool {
	return pk >= sp.LowPartitionKey && (sp.HighPartitionKey == "" || pk < sp.HighPartitionKey)
}

// overlaps reports whether sp and o, of one table, share a PartitionKey.
func (sp Span) overlaps(o Span) bool {
	return (o.HighPartitionKey == "" || sp.LowPartitionKey < o.HighPartitionKey) &&
		(sp.HighPartitionKey == "" || o.LowPartitionKey < sp.HighPartitionKey)
}

// check refuses a span that holds nothing.
func (sp Span) check() error {
	if sp.HighPartitionKey != "" && sp.HighPartitionKey <= sp.LowPartitionKey {
		return fmt.Errorf("partition: empty span [%q, %q) of table %s", sp.LowPartitionKey, sp.HighPartitionKey, sp.Table)
	}
	return nil
}

// same reports whether sp and o name the same span.
func (sp Span) same(o Span) bool {
	return sp.Account == o.Account && strings.EqualFold(sp.Table, o.Table) &&
		sp.LowPartitionKey == o.LowPartitionKey && sp.HighPartitionKey == o.HighPartitionKey
}

// SpanSnapshot is a consistent view of one span of a table and of the
// applied index of the group replicating it, to stream.
type SpanSnapshot struct {
	snap    *lsm.Snapshot
	span    Span
	group   uint64
	applied uint64
	merged  []uint64 // the groups the span merged, as its record has them
	prefix  []byte   // the table's key prefix in this store
}

// SnapshotSpan returns a view of span sp of the store as of now, with
// group's applied index as of the same instant: a stamped write records
// its index in the batch of its data, so the two always agree. A missing
// table is TableNotFound. The caller closes the view.
func (s *Store) SnapshotSpan(group uint64, sp Span) (*SpanSnapshot, error) {
	return s.snapshotSpan(group, sp, nil)
}

// SnapshotGroupSpan is SnapshotSpan for the leader of group, sp being the
// group's span as the leader read it, recorded whether the group had a
// span record then (SpanRecorded): it is ErrSpanChanged if the group's
// span record at the view's instant is another span, or frozen, or gone
// (a split, freeze or merge of the group applied between the leader's
// read and the view), so that no view carries a span with an index past
// the command that changed it.
func (s *Store) SnapshotGroupSpan(group uint64, sp Span, recorded bool) (*SpanSnapshot, error) {
	return s.snapshotSpan(group, sp, func(rec groupSpan, ok bool, t *table) error {
		return spanRecordIs(rec, ok, group, t, sp, recorded)
	})
}

// snapshotSpan is SnapshotSpan, with check, if not nil, run on the
// group's span record as the view has it (ok: it has one) before the
// view is returned.
func (s *Store) snapshotSpan(group uint64, sp Span, check func(rec groupSpan, ok bool, t *table) error) (*SpanSnapshot, error) {
	if err := sp.check(); err != nil {
		return nil, err
	}
	t, err := s.acquireTable(sp.Account, sp.Table)
	if err != nil {
		return nil, err
	}
	defer t.release()
	snap := s.db.NewSnapshot()
	applied, err := readAppliedIndex(snap, group)
	var rec groupSpan
	var recorded bool
	if err == nil {
		rec, recorded, err = readGroupSpan(snap, group)
	}
	if err == nil && check != nil {
		err = check(rec, recorded, t)
	}
	if err != nil {
		return nil, errors.Join(err, snap.Close())
	}
	sp.Table = t.name // as created, whatever case the caller used
	return &SpanSnapshot{snap: snap, span: sp, group: group, applied: applied, merged: rec.merged, prefix: t.prefix}, nil
}

// readGroupSpan reads group's span record as rd has it; ok is false when
// there is none.
func readGroupSpan(rd reader, group uint64) (g groupSpan, ok bool, err error) {
	v, err := rd.Get(groupMetaKey(metaGroupSpan, group))
	if errors.Is(err, lsm.ErrNotFound) {
		return groupSpan{}, false, nil
	}
	if err != nil {
		return groupSpan{}, false, fmt.Errorf("partition: read span record of group %d: %w", group, err)
	}
	g, err = decodeGroupSpan(v)
	return g, err == nil, err
}

// spanRecordIs checks group's span record g (ok: there is one) against
// sp, of table t: ErrSpanChanged if it is another span, or frozen, or
// missing while the caller read one (recorded; a merge deletes the right
// group's). A group that never had a record has the span its catalog
// entry gives it, which only a split (writing a record) or the table's
// drop changes.
func spanRecordIs(g groupSpan, ok bool, group uint64, t *table, sp Span, recorded bool) error {
	if !ok {
		if recorded {
			return fmt.Errorf("%w: group %d has no span record any more", ErrSpanChanged, group)
		}
		return nil
	}
	if g.tableID != t.id || g.frozen || !g.span.same(sp) {
		return fmt.Errorf("%w: group %d records [%q, %q) of table %d (frozen %v), asked for [%q, %q)", ErrSpanChanged,
			group, g.span.LowPartitionKey, g.span.HighPartitionKey, g.tableID, g.frozen, sp.LowPartitionKey, sp.HighPartitionKey)
	}
	return nil
}

// AppliedIndex is the group's applied index the view holds.
func (ss *SpanSnapshot) AppliedIndex() uint64 { return ss.applied }

// Close releases the view.
func (ss *SpanSnapshot) Close() error { return ss.snap.Close() }

// spanBounds returns the engine key range of span sp of the table whose
// key prefix is prefix.
func spanBounds(prefix []byte, sp Span) (lo, hi []byte) {
	lo = appendEscaped(append([]byte(nil), prefix...), sp.LowPartitionKey)
	if sp.HighPartitionKey == "" {
		return lo, prefixSuccessor(prefix)
	}
	return lo, appendEscaped(append([]byte(nil), prefix...), sp.HighPartitionKey)
}

// splitEntitySuffix decodes esc(pk) | esc(rk), an entity key past its
// table prefix (or a staged key past its group).
func splitEntitySuffix(suffix []byte) (pk, rk []byte, err error) {
	pk, off := readEscaped(suffix, 0, nil)
	if off < 0 {
		return nil, nil, fmt.Errorf("%w: bad PartitionKey", errBadKey)
	}
	rk, off = readEscaped(suffix, off, nil)
	if off != len(suffix) {
		return nil, nil, fmt.Errorf("%w: bad RowKey", errBadKey)
	}
	return pk, rk, nil
}

// stagedPrefix is the prefix of the pairs a span ingest of group stages.
func stagedPrefix(group uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{nsStaged}, group)
}

// IngestSpan replaces span sp of the store with a span snapshot stream of
// it (SpanSnapshot.WriteTo) and sets group's applied index to the
// stream's, which it returns. A stream that is cut, damaged, out of key
// order, holds an entity outside its span, or is of another span or
// group, is refused with an error wrapping ErrBadSpanSnapshot, and the
// store is left as it was. A crash at any point leaves the span as it was
// or as the stream has it (see the two phases above). The table must
// exist (else TableNotFound); while the span moves, the table's writes
// wait, and the caller must not read the span.
func (s *Store) IngestSpan(group uint64, sp Span, r io.Reader) (uint64, error) {
	return s.IngestSpanChecked(group, sp, r, nil)
}

// EmptySpan empties span sp of the store as range group group's: an
// ingest of EmptySpanStream, so the span's entities go, the group
// records sp as its span and its applied index becomes 0.
func (s *Store) EmptySpan(group uint64, sp Span) error {
	_, err := s.IngestSpan(group, sp, bytes.NewReader(EmptySpanStream(group, sp)))
	return err
}

// IngestSpanChecked is IngestSpan, with a check that runs before anything
// of the stream is staged, while no other ingest of the store runs: an
// error from it ends the ingest with the span as it was (an earlier
// ingest of the group that a storage error left unfinished is finished
// first), and is returned as it is. A caller whose ingests may be
// overtaken by another group's (a snapshot of the group that merged this
// one's span) decides there, in their order, whether this one still may
// go in.
func (s *Store) IngestSpanChecked(group uint64, sp Span, r io.Reader, check func() error) (uint64, error) {
	if err := sp.check(); err != nil {
		return 0, err
	}
	s.ingestMu.Lock()
	defer s.ingestMu.Unlock()
	t, err := s.acquireTable(sp.Account, sp.Table)
	if err != nil {
		return 0, err
	}
	defer t.release()
	m := spanIngest{group: group, tableID: t.id, account: t.account, low: sp.LowPartitionKey, high: sp.HighPartitionKey}
	// An earlier ingest of the group whose move failed on a storage error
	// left its marker: its staged pairs are what its span must become, so
	// finish it before they are replaced.
	switch v, err := s.db.Get(groupMetaKey(metaSpanIngest, group)); {
	case err == nil:
		prev, err := decodeSpanIngest(group, v)
		if err == nil {
			err = s.finishSpanIngest(prev)
		}
		if err != nil {
			return 0, err
		}
	case !errors.Is(err, lsm.ErrNotFound):
		return 0, fmt.Errorf("partition: ingest span of group %d: read marker: %w", group, err)
	}
	if check != nil {
		if err := check(); err != nil {
			return 0, err
		}
	}
	// Left over by an ingest cut before its marker.
	if err := s.deleteStaged(group); err != nil {
		return 0, err
	}
	m.applied, m.merged, err = s.stageSpan(group, sp, r)
	if err != nil {
		return 0, errors.Join(err, s.deleteStaged(group))
	}
	if err := s.db.Set(groupMetaKey(metaSpanIngest, group), m.encode(), s.syncWO); err != nil {
		return 0, fmt.Errorf("partition: ingest span of group %d: write marker: %w", group, err)
	}
	if err := s.moveStaged(t, m); err != nil {
		return 0, err
	}
	return m.applied, nil
}

// stageSpan reads a span stream, checks it and writes its entities to the
// staging namespace of group; it returns the stream's applied index and
// the groups its span merged.
func (s *Store) stageSpan(group uint64, want Span, r io.Reader) (uint64, []uint64, error) {
	b := s.db.NewBatch()
	h, err := readSpanStream(group, want, false, r, func(key, val []byte) error {
		b.Set(key, val)
		if b.Size() >= spanIngestBatchBytes {
			if err := s.db.Apply(b, unsyncedWO); err != nil {
				return fmt.Errorf("partition: ingest span of group %d: stage: %w", group, err)
			}
			b.Reset()
		}
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	// Unsynced: the marker's synced write makes the staged pairs durable
	// before anything of the span is touched.
	if err := s.db.Apply(b, unsyncedWO); err != nil {
		return 0, nil, fmt.Errorf("partition: ingest span of group %d: stage: %w", group, err)
	}
	return h.applied, h.merged, nil
}

// moveStaged is the second phase of an ingest, and what Open redoes after
// a crash: with the marker durable, it replaces the span's entities with
// the staged ones, sets the applied index and removes the marker in one
// synced batch, then drops the staged pairs. Every step can run again
// from the start with the same outcome, since the staged pairs stay until
// the marker is gone.
func (s *Store) moveStaged(t *table, m spanIngest) error {
	sp := Span{Account: m.account, LowPartitionKey: m.low, HighPartitionKey: m.high}
	wrap := func(step string, err error) error {
		return fmt.Errorf("partition: ingest span [%q, %q) of table %d for group %d: %s: %w", m.low, m.high, m.tableID, m.group, step, err)
	}
	// Writes to the table wait (they hold t.mu shared until their
	// statistics are recorded), and so do splits, merges and recounts,
	// which therefore never see half a move.
	t.mu.Lock()
	defer t.mu.Unlock()
	snap := s.db.NewSnapshot()
	defer snap.Close()

	var stats spanStatDeltas
	b := s.db.NewBatch()
	flush := func() error {
		if b.Size() < spanIngestBatchBytes {
			return nil
		}
		err := s.db.Apply(b, unsyncedWO)
		b.Reset()
		return err
	}
	// The span's entities go, and those of any part of the group's old
	// span it gives up that no other group holds (span_given_up.go).
	// Until the commit below, the group's record is its old span, so a
	// move redone after a crash finds the same parts.
	givenUp, err := s.spansGivenUp(t, m.group, sp)
	if err != nil {
		return wrap("find the span given up", err)
	}
	for _, part := range append(givenUp, sp) {
		lo, hi := spanBounds(t.prefix, part)
		it := snap.NewIter(&lsm.IterOptions{LowerBound: lo, UpperBound: hi})
		for ok := it.First(); ok && err == nil; ok = it.Next() {
			pk, _ := readEscaped(it.Key(), len(t.prefix), nil)
			stats.add(pk, -1, -int64(len(it.Key())+len(it.Value())))
			b.Delete(it.Key())
			err = flush()
		}
		if err := errors.Join(err, it.Close()); err != nil {
			return wrap("clear", err)
		}
	}

	prefix := stagedPrefix(m.group)
	var newest odata.DateTime
	var key []byte
	it := snap.NewIter(&lsm.IterOptions{LowerBound: prefix, UpperBound: prefixSuccessor(prefix)})
	for ok := it.First(); ok && err == nil; ok = it.Next() {
		suffix := it.Key()[len(prefix):]
		pk, _, kerr := splitEntitySuffix(suffix)
		ts, verr := odata.EncodedTimestamp(it.Value())
		if err = errors.Join(kerr, verr); err != nil {
			break
		}
		newest = max(newest, ts)
		key = append(append(key[:0], t.prefix...), suffix...)
		stats.add(pk, 1, int64(len(key)+len(it.Value())))
		b.Set(key, it.Value())
		err = flush()
	}
	if err := errors.Join(err, it.Close()); err != nil {
		return wrap("copy", err)
	}

	setAppliedIndex(b, m.group, m.applied)
	gs := groupSpan{tableID: t.id, span: Span{Account: t.account, Table: t.name, LowPartitionKey: m.low, HighPartitionKey: m.high}, merged: m.merged}
	setGroupSpan(b, m.group, gs)
	b.Delete(groupMetaKey(metaSpanIngest, m.group))
	if err := s.commitSpans(b, s.syncWO, spanChange{group: m.group, g: gs}); err != nil {
		return wrap("commit", err)
	}
	// The entities' timestamps may be past this store's clock: later
	// writes must commit above them.
	s.clock.observe(newest)
	stats.record(t)

	b.Reset()
	it = snap.NewIter(&lsm.IterOptions{LowerBound: prefix, UpperBound: prefixSuccessor(prefix)})
	for ok := it.First(); ok && err == nil; ok = it.Next() {
		b.Delete(it.Key())
		err = flush()
	}
	if err := errors.Join(err, it.Close()); err != nil {
		return wrap("drop staged pairs", err)
	}
	if err := s.db.Apply(b, unsyncedWO); err != nil {
		return wrap("drop staged pairs", err)
	}
	return nil
}

// deleteStaged deletes the pairs staged for group, key by key (the engine
// has no range deletion).
func (s *Store) deleteStaged(group uint64) error {
	prefix := stagedPrefix(group)
	return s.deleteRange(prefix, prefixSuccessor(prefix))
}

// deleteRange deletes every key in [lo, hi), read at a snapshot, in
// bounded unsynced batches.
func (s *Store) deleteRange(lo, hi []byte) error {
	snap := s.db.NewSnapshot()
	defer snap.Close()
	it := snap.NewIter(&lsm.IterOptions{LowerBound: lo, UpperBound: hi})
	b := s.db.NewBatch()
	var err error
	for ok := it.First(); ok && err == nil; ok = it.Next() {
		b.Delete(it.Key())
		if b.Size() >= spanIngestBatchBytes {
			err = s.db.Apply(b, unsyncedWO)
			b.Reset()
		}
	}
	if err == nil {
		err = s.db.Apply(b, unsyncedWO)
	}
	if err := errors.Join(err, it.Close()); err != nil {
		return fmt.Errorf("partition: delete staged span pairs: %w", err)
	}
	return nil
}

// spanStatDeltas gathers an ingest's changes to the range statistics, one
// entry per partition (keys come in order, so runs of one partition
// merge), to record once the ingest has committed.
type spanStatDeltas []statDelta

func (d *spanStatDeltas) add(pk []byte, entities, size int64) {
	if n := len(*d); n > 0 && (*d)[n-1].pk == string(pk) {
		(*d)[n-1].entities += entities
		(*d)[n-1].bytes += size
		return
	}
	*d = append(*d, statDelta{pk: string(pk), entities: entities, bytes: size})
}

// record adds the deltas to t's ranges as writes do, minus the load: an
// ingest is not client traffic and must not split a range by its size.
// The caller holds t.mu exclusively.
func (d spanStatDeltas) record(t *table) {
	rs := t.rangeList()
	for _, x := range d {
		r := findRange(rs, x.pk)
		r.entities.Add(x.entities)
		r.bytes.Add(x.bytes)
		if r.tracking {
			r.trackMu.Lock()
			r.deltas = append(r.deltas, x)
			r.trackMu.Unlock()
		}
	}
	if len(d) > 0 {
		t.dirty.Store(true)
	}
}

// finishSpanIngest finishes the move of an ingest whose marker is
// present; if its table has been dropped since, it drops the marker and
// the staged pairs instead.
func (s *Store) finishSpanIngest(m spanIngest) error {
	var lower string
	err := s.scan(catalogPrefix(m.account), prefixSuccessor(catalogPrefix(m.account)), func(k, v []byte) error {
		if id, _, _, err := decodeCatalogValue(v); err != nil || id != m.tableID {
			return err
		}
		_, l, err := decodeCatalogKey(k)
		lower = l
		return err
	})
	if err != nil {
		return err
	}
	if lower != "" {
		t, err := s.acquireTable(m.account, lower)
		if err != nil {
			return err
		}
		defer t.release()
		return s.moveStaged(t, m)
	}
	if err := s.deleteStaged(m.group); err != nil {
		return err
	}
	if err := s.db.Delete(groupMetaKey(metaSpanIngest, m.group), s.syncWO); err != nil {
		return fmt.Errorf("partition: drop span ingest marker of group %d: %w", m.group, err)
	}
	return nil
}

// finishSpanIngests runs at Open: it redoes the move of every ingest a
// crash interrupted after its stream had checked out (a marker is
// present), then drops whatever staged pairs remain (of ingests cut before
// their marker, or after their move). The persisted range statistics
// predate the move, so the ranges are recounted.
func (s *Store) finishSpanIngests() error {
	lo := []byte{nsMeta, metaSpanIngest}
	var markers []spanIngest
	err := s.scan(lo, prefixSuccessor(lo), func(k, v []byte) error {
		if len(k) != len(lo)+8 {
			return fmt.Errorf("partition: span ingest marker key %x: %w", k, lsm.ErrCorruption)
		}
		m, err := decodeSpanIngest(binary.BigEndian.Uint64(k[len(lo):]), v)
		if err != nil {
			return err
		}
		markers = append(markers, m)
		return nil
	})
	if err != nil {
		return err
	}
	for _, m := range markers {
		if err := s.finishSpanIngest(m); err != nil {
			return err
		}
		s.needRecount = true
	}
	return s.deleteRange([]byte{nsStaged}, []byte{nsStaged + 1})
}
