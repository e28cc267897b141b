package partition

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/tabuladb/tabula/lsm"
)

// A cluster records in its system group the nodes that fell silent, and
// since when, so that a new placement controller counts a dead node's
// time from when it went silent, not from its own election (the cluster
// package's placement). The store keeps the record as the system group's
// log writes it.

// SetNodeDown records that cluster node node has not been heard from since
// since, or, with a zero since, that it is heard again. Written with ctx's
// stamp (the system group's applied index) in the same batch.
func (s *Store) SetNodeDown(ctx context.Context, node uint64, since time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if node == 0 {
		return fmt.Errorf("partition: record node liveness: node 0")
	}
	b := s.db.NewBatch()
	key := groupMetaKey(metaNodeDown, node)
	if since.IsZero() {
		b.Delete(key)
	} else {
		b.Set(key, binary.BigEndian.AppendUint64(nil, uint64(since.UnixNano())))
	}
	if err := s.db.Apply(b, s.writeOptions(ctx, b)); err != nil {
		return fmt.Errorf("partition: record node %d's liveness: %w", node, err)
	}
	return nil
}

// NodesDown returns the nodes recorded down, with since when.
func (s *Store) NodesDown() (map[uint64]time.Time, error) {
	prefix := []byte{nsMeta, metaNodeDown}
	it := s.db.NewIter(&lsm.IterOptions{LowerBound: prefix, UpperBound: prefixSuccessor(prefix)})
	out := map[uint64]time.Time{}
	for ok := it.First(); ok; ok = it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) != len(prefix)+8 || len(v) != 8 {
			it.Close()
			return nil, fmt.Errorf("%w: node liveness record %x = %x", errBadKey, k, v)
		}
		out[binary.BigEndian.Uint64(k[len(prefix):])] = time.Unix(0, int64(binary.BigEndian.Uint64(v)))
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("partition: read node liveness: %w", err)
	}
	return out, nil
}
