package export

import (
	"context"
	"fmt"
	"io"

	"github.com/cespare/xxhash/v2"
	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
)

// Export writes the tables of s (all of them, or those for which include
// returns true) with all their entities to w, reading each table page by
// page (one query page, at most 1,000 entities, at a time), so memory
// does not grow with the store. It returns the counts written.
func Export(ctx context.Context, s *partition.Store, w io.Writer, include func(partition.TableRef) bool) (tables, entities int64, err error) {
	ew := NewWriter(w)
	all, err := s.AllTables()
	if err != nil {
		return 0, 0, err
	}
	for _, t := range all {
		if include != nil && !include(t) {
			continue
		}
		if err := ew.Table(t.Account, t.Name); err != nil {
			return 0, 0, err
		}
		q := partition.EntityQuery{}
		for {
			next, err := s.QueryEntities(ctx, t.Account, t.Name, q, func(se *partition.StoredEntity) error {
				e, err := se.Entity()
				if err != nil {
					return err
				}
				e.Timestamp = se.Timestamp
				return ew.Entity(e)
			})
			if err != nil {
				return 0, 0, fmt.Errorf("export: table %s/%s: %w", t.Account, t.Name, err)
			}
			if next.IsZero() {
				break
			}
			q.NextPartitionKey, q.NextRowKey = next.NextPartitionKey, next.NextRowKey
		}
	}
	if err := ew.Close(); err != nil {
		return 0, 0, err
	}
	tables, entities = ew.Counts()
	return tables, entities, nil
}

// Summary describes a whole export file, as Check read it.
type Summary struct {
	Lines            int
	Tables, Entities int64
	Size             int64
	XXHash           uint64 // of the whole file: identifies it for a resumed import
}

// Check reads a whole export file and checks every line (Reader's rules),
// without writing anything. Import runs it first, so that a truncated or
// malformed file is refused before any of it is imported.
func Check(in io.Reader) (Summary, error) {
	h := xxhash.New()
	cr := &countingReader{r: io.TeeReader(in, h)}
	r := NewReader(cr)
	var s Summary
	for {
		it, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return s, err
		}
		switch it.Kind {
		case KindTable:
			s.Tables++
		case KindEntity:
			s.Entities++
		}
	}
	s.Lines, _ = r.Line()
	s.Size, s.XXHash = cr.n, h.Sum64()
	return s, nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// ImportOptions control Import.
type ImportOptions struct {
	// ResumeLine: entity lines before it were imported by an earlier,
	// interrupted run and are skipped (their tables are still created if
	// missing). 0 or 1 imports everything.
	ResumeLine int
	// Progress, if set, is called after every committed batch with the
	// number of the first line not yet imported: every entity before it
	// is durably stored. An error stops the import.
	Progress func(nextLine int, entities int64) error
}

// ImportStats counts what Import wrote.
type ImportStats struct {
	Tables, Entities, Batches int64
}

// maxImportBatchBytes is where Import cuts a batch by size, with a margin
// under partition.MaxBatchBytes for keys and encoding overhead.
const maxImportBatchBytes = partition.MaxBatchBytes * 3 / 4

// Import loads an export file into s: each table is created if missing,
// and its entities are written with InsertOrReplace in entity group
// transactions (partition.Store.ExecuteBatch) of up to 100 entities of one
// partition, so each batch is stored whole or not at all, and running an
// import again, whole or from a ResumeLine, gives the same entities
// (with new Timestamps: the store stamps every write). It reads the file
// once and holds one batch in memory. Call Check first: Import stops at
// the first bad line, after importing the batches before it.
func Import(ctx context.Context, s *partition.Store, in io.Reader, o ImportOptions) (ImportStats, error) {
	var (
		st               ImportStats
		r                = NewReader(in)
		account, table   string
		ops              []partition.Op
		opsBytes         int
		lastLine         int
		entitiesInserted int64
	)
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		if _, err := s.ExecuteBatch(ctx, account, table, ops); err != nil {
			first := ops[0].Entity
			return fmt.Errorf("export: import the batch of %d entities of %s/%s partition %q ending at line %d: %w", len(ops), account, table, first.PartitionKey, lastLine, err)
		}
		st.Batches++
		st.Entities += int64(len(ops))
		entitiesInserted += int64(len(ops))
		ops, opsBytes = ops[:0], 0
		if o.Progress != nil {
			return o.Progress(lastLine+1, entitiesInserted)
		}
		return nil
	}
	for {
		it, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return st, err
		}
		line, _ := r.Line()
		switch it.Kind {
		case KindTable:
			if err := flush(); err != nil {
				return st, err
			}
			account, table = it.Account, it.Table
			if _, err := s.CreateTable(ctx, account, table); err == nil {
				st.Tables++
			} else if !partition.IsCode(err, partition.CodeTableAlreadyExists) {
				return st, &LineError{Line: line, Offset: offsetOf(r), Err: fmt.Errorf("create table %s/%s: %w", account, table, err)}
			}
		case KindEntity:
			if line < o.ResumeLine {
				continue
			}
			e := it.Entity
			e.Timestamp = 0
			size := len(e.PartitionKey) + len(e.RowKey) + len(odata.EncodeEntity(e)) + 64
			if len(ops) > 0 && (ops[0].Entity.PartitionKey != e.PartitionKey || len(ops) == partition.MaxBatchOps || opsBytes+size > maxImportBatchBytes) {
				if err := flush(); err != nil {
					return st, err
				}
			}
			ops = append(ops, partition.Op{Kind: partition.OpInsertOrReplace, Entity: e})
			opsBytes += size
			lastLine = line
		case KindEnd:
			if err := flush(); err != nil {
				return st, err
			}
		}
	}
	return st, nil
}

func offsetOf(r *Reader) int64 {
	_, off := r.Line()
	return off
}
