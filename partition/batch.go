package partition

import (
	"context"
	"fmt"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/odata"
)

// Limits of an entity group transaction (Performing entity group
// transactions).
const (
	MaxBatchOps   = 100
	MaxBatchBytes = 4 << 20 // keys plus encoded values of the whole batch
)

// ExecuteBatch runs an entity group transaction: up to 100 operations on
// entities of one PartitionKey, each entity at most once, at most 4 MiB in
// all. Under the partition's latch every condition is checked in order and
// then everything is enqueued as one engine batch, whose durability is
// awaited after the latch is released (as in Apply): all or nothing, and
// invisible to queries (which read at a snapshot) until it is whole and
// durable.
//
// The results are per operation, in order. A client-visible failure is a
// *BatchError naming the operation, and nothing is applied: a missing table
// is reported at index 0, too many operations at index 100, a batch too
// large at the operation that crosses the limit. Storage failures and
// context cancellation are returned as they are. An empty batch does
// nothing.
func (s *Store) ExecuteBatch(ctx context.Context, account, tableName string, ops []Op) ([]StoredEntity, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t, err := s.acquireTable(account, tableName)
	if err != nil {
		return nil, &BatchError{Index: 0, Err: err}
	}
	defer t.release()
	if len(ops) == 0 {
		return nil, nil
	}
	if len(ops) > MaxBatchOps {
		return nil, &BatchError{Index: MaxBatchOps, Err: serviceError(odata.CodeInvalidInput, msgTooManyChanges)}
	}
	var pk string
	rows := make(map[string]struct{}, len(ops))
	for i := range ops {
		op := &ops[i]
		if err := checkOp(op); err != nil {
			return nil, &BatchError{Index: i, Err: err}
		}
		if i == 0 {
			pk = op.Entity.PartitionKey
		} else if op.Entity.PartitionKey != pk {
			return nil, &BatchError{Index: i, Err: serviceError(CodeCommandsInBatchActOnDifferentPartitions, msgDifferentPartitions)}
		}
		if _, dup := rows[op.Entity.RowKey]; dup {
			return nil, &BatchError{Index: i, Err: serviceError(CodeInvalidDuplicateRow, msgDuplicateRow)}
		}
		rows[op.Entity.RowKey] = struct{}{}
	}

	// t.mu is held from before the commit until its statistics are
	// recorded (see recordWrite), across the durability wait.
	t.mu.RLock()
	defer t.mu.RUnlock()
	ws, p, err := s.enqueueBatch(ctx, t, account, pk, ops)
	if err != nil {
		return nil, err
	}
	// Outside the latch, as in Apply.
	if err := p.Wait(); err != nil {
		return nil, fmt.Errorf("partition: batch of %d on partition %q: %w", len(ws), pk, err)
	}
	var dEnt, dBytes int64
	for i := range ws {
		e, n := ws[i].statDeltas()
		dEnt += e
		dBytes += n
	}
	t.recordWrite(pk, int64(len(ws)), dEnt, dBytes)
	out := make([]StoredEntity, len(ws))
	for i := range ws {
		out[i] = ws[i].result()
	}
	return out, nil
}

// enqueueBatch is the part of ExecuteBatch under the partition's latch:
// read and check every operation in order, stamp, and enqueue them as one
// engine batch. The caller holds t.mu shared and must Wait on the result.
func (s *Store) enqueueBatch(ctx context.Context, t *table, account, pk string, ops []Op) (ws []staged, p lsm.PendingCommit, err error) {
	p, err = s.underLatch(s.latch.forPartition(account, t.id, pk), func() (lsm.PendingCommit, error) {
		ws = make([]staged, len(ops))
		var floor odata.DateTime
		for i := range ops {
			if i%16 == 15 {
				if err := ctx.Err(); err != nil {
					return lsm.PendingCommit{}, err
				}
			}
			key := AppendEntityKey(nil, account, t.id, pk, ops[i].Entity.RowKey)
			old, err := s.getLatched(key)
			if err != nil {
				return lsm.PendingCommit{}, err
			}
			if ws[i], err = prepare(&ops[i], key, old); err != nil {
				if ErrorCode(err) == "" {
					return lsm.PendingCommit{}, err
				}
				return lsm.PendingCommit{}, &BatchError{Index: i, Err: err}
			}
			floor = max(floor, ws[i].floor)
		}
		if err := ctx.Err(); err != nil {
			return lsm.PendingCommit{}, err
		}
		ts, err := s.commitTimestamps(ctx, len(ws), floor)
		if err != nil {
			return lsm.PendingCommit{}, err
		}
		b := s.db.NewBatch()
		for i := range ws {
			w := &ws[i]
			w.stamp(ts + odata.DateTime(i))
			if w.del {
				b.Delete(w.key)
			} else {
				b.Set(w.key, w.value)
			}
			if b.Size() > MaxBatchBytes {
				return lsm.PendingCommit{}, &BatchError{Index: i, Err: serviceError(CodeRequestBodyTooLarge, msgBodyTooLarge)}
			}
		}
		p, err := s.db.Enqueue(b, s.writeOptions(ctx, b))
		if err != nil {
			return p, fmt.Errorf("partition: batch of %d on partition %q: %w", len(ws), pk, err)
		}
		return p, nil
	})
	return ws, p, err
}
