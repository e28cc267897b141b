package partition

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tabuladb/tabula/lsm"
)

// A range group's span is the PartitionKeys of its table whose entities
// its log writes. Unlike the catalog's descriptors, which the system
// group's log changes and routing reads, the span is changed by the
// group's own log only, at one position of it on every replica: when the
// group splits (SplitGroupSpan), and when a replica takes a span
// snapshot (IngestSpan). So every replica of the group refuses the same
// writes, whatever it has applied of the system group. A group that has
// no record holds its whole table: it never split.

// groupSpanVersion is the first byte of a span record.
const groupSpanVersion = 1

// encodeGroupSpan encodes a span record: version | uvarint len | low |
// uvarint len | high ("" for unbounded).
func encodeGroupSpan(low, high string) []byte {
	v := []byte{groupSpanVersion}
	v = binary.AppendUvarint(v, uint64(len(low)))
	v = append(v, low...)
	v = binary.AppendUvarint(v, uint64(len(high)))
	return append(v, high...)
}

func decodeGroupSpan(v []byte) (low, high string, err error) {
	if len(v) == 0 || v[0] != groupSpanVersion {
		return "", "", fmt.Errorf("partition: group span record: bad version: %w", lsm.ErrCorruption)
	}
	v = v[1:]
	var out [2]string
	for i := range out {
		l, n := binary.Uvarint(v)
		if n <= 0 || l > uint64(len(v)-n) {
			return "", "", fmt.Errorf("partition: group span record: cut: %w", lsm.ErrCorruption)
		}
		out[i], v = string(v[n:n+int(l)]), v[n+int(l):]
	}
	if len(v) != 0 || (out[1] != "" && out[1] <= out[0]) {
		return "", "", fmt.Errorf("partition: group span record: empty or trailing bytes: %w", lsm.ErrCorruption)
	}
	return out[0], out[1], nil
}

// setGroupSpan adds to b the record of group's span.
func setGroupSpan(b *lsm.Batch, group uint64, low, high string) {
	b.Set(groupMetaKey(metaGroupSpan, group), encodeGroupSpan(low, high))
}

// GroupSpan returns the span of range group group as its log has set it
// on this store: its table (from the catalog) and the PartitionKeys it
// holds. ok is false for a group the catalog does not know.
func (s *Store) GroupSpan(group uint64) (sp Span, ok bool, err error) {
	tg, ok := s.GroupTable(group)
	if !ok {
		return Span{}, false, nil
	}
	sp = Span{Account: tg.Account, Table: tg.Table}
	switch v, err := s.db.Get(groupMetaKey(metaGroupSpan, group)); {
	case errors.Is(err, lsm.ErrNotFound):
		return sp, true, nil // never split: the whole table
	case err != nil:
		return Span{}, false, fmt.Errorf("partition: read the span of group %d: %w", group, err)
	default:
		sp.LowPartitionKey, sp.HighPartitionKey, err = decodeGroupSpan(v)
		return sp, err == nil, err
	}
}

// SplitGroupSpan splits range group parent's span at PartitionKey at: the
// parent keeps the keys below it, and group child holds those from at to
// the parent's old end. It is the apply of the split command in the
// parent's log (ctx's Stamp names it), so the spans change at the same
// position of that log on every replica, in the batch of the parent's
// applied index; no entity moves. A key that is not strictly inside the
// parent's span is InvalidInput.
func (s *Store) SplitGroupSpan(ctx context.Context, parent, child uint64, at string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sp, ok, err := s.GroupSpan(parent)
	switch {
	case err != nil:
		return err
	case !ok:
		return serviceError(CodeTableNotFound, msgTableNotFound)
	case at <= sp.LowPartitionKey || (sp.HighPartitionKey != "" && at >= sp.HighPartitionKey) || child == 0 || child == parent:
		return serviceErrorf(CodeInvalidInput, "The split is not valid.", "(%q in group %d's span [%q, %q))", at, parent, sp.LowPartitionKey, sp.HighPartitionKey)
	}
	b := s.db.NewBatch()
	setGroupSpan(b, parent, sp.LowPartitionKey, at)
	setGroupSpan(b, child, at, sp.HighPartitionKey)
	if err := s.db.Apply(b, s.writeOptions(ctx, b)); err != nil {
		return fmt.Errorf("partition: split group %d at %q: %w", parent, at, err)
	}
	return nil
}
