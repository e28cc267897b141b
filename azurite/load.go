package azurite

import (
	"context"
	"fmt"
	"io"

	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
)

// Stats counts what Load found and wrote.
type Stats struct {
	Tables, TablesCreated, Entities, Batches int64
}

// maxBatchBytes is where Load cuts a batch by size, under the service's
// limit with a margin for keys and encoding.
const maxBatchBytes = partition.MaxBatchBytes * 3 / 4

// Load reads the database in r into s: every table of every account is
// created if missing, and every entity written with InsertOrReplace, in
// entity group transactions of consecutive entities of one partition (at
// most 100), each stored whole or not at all. Loading the same file again
// gives the same entities. The Timestamps and ETags are the store's own.
// Call Read with a no-op first to refuse a damaged file before writing.
func Load(ctx context.Context, s *partition.Store, r io.Reader) (Stats, error) {
	var (
		st             Stats
		account, table string
		ops            []partition.Op
		opsBytes       int
	)
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		if _, err := s.ExecuteBatch(ctx, account, table, ops); err != nil {
			return fmt.Errorf("azurite: load a batch of %d entities of %s/%s partition %q: %w", len(ops), account, table, ops[0].Entity.PartitionKey, err)
		}
		st.Batches++
		st.Entities += int64(len(ops))
		ops, opsBytes = ops[:0], 0
		return nil
	}
	err := Read(r, func(it Item) error {
		switch it.Kind {
		case KindTable:
			st.Tables++
			if _, err := s.CreateTable(ctx, it.Account, it.Table); err == nil {
				st.TablesCreated++
			} else if !partition.IsCode(err, partition.CodeTableAlreadyExists) {
				return fmt.Errorf("azurite: create table %s/%s: %w", it.Account, it.Table, err)
			}
		case KindEntity:
			e := it.Entity
			e.Timestamp = 0
			size := len(e.PartitionKey) + len(e.RowKey) + len(odata.EncodeEntity(e)) + 64
			if len(ops) > 0 && (it.Account != account || it.Table != table || ops[0].Entity.PartitionKey != e.PartitionKey ||
				len(ops) == partition.MaxBatchOps || opsBytes+size > maxBatchBytes) {
				if err := flush(); err != nil {
					return err
				}
			}
			account, table = it.Account, it.Table
			ops = append(ops, partition.Op{Kind: partition.OpInsertOrReplace, Entity: e})
			opsBytes += size
		}
		return nil
	})
	if err != nil {
		return st, err
	}
	return st, flush()
}
