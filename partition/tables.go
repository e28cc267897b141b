package partition

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/odata"
)

// Table is a table of an account, named as it was created.
type Table struct {
	Name string
}

// TableQuery is a Query Tables request: Filter is a $filter over TableName,
// Top the page size (0 means 1,000, the most a page holds), NextTableName
// the continuation token of the previous page.
type TableQuery struct {
	Filter        string
	Top           int
	NextTableName string
}

// TablePage is one page of Query Tables; NextTableName is empty on the
// last page.
type TablePage struct {
	Tables        []Table
	NextTableName string
}

// ValidateTableName checks a name for Create Table: 3 to 63 characters,
// letters and digits, starting with a letter, and not "tables" (reserved,
// in any case). A wrong length is OutOfRangeInput, anything else
// InvalidResourceName (as the service and the emulator answer).
func ValidateTableName(name string) error {
	if name != "" && (len(name) < 3 || len(name) > 63) {
		return serviceErrorf(CodeOutOfRangeInput, msgNameLength, "(table name %q)", name)
	}
	ok := name != ""
	for i := 0; i < len(name) && ok; i++ {
		c := name[i]
		isLetter := c|0x20 >= 'a' && c|0x20 <= 'z'
		ok = isLetter || (i > 0 && c >= '0' && c <= '9')
	}
	if !ok || strings.EqualFold(name, "tables") {
		return serviceErrorf(CodeInvalidResourceName, msgInvalidName, "(table name %q)", name)
	}
	return nil
}

// CreateTable creates a table. Names are case-insensitive: creating
// "MyTable" when "mytable" exists is TableAlreadyExists. The table gets a
// new id, so a table re-created after a drop starts empty.
func (s *Store) CreateTable(ctx context.Context, account, name string) (Table, error) {
	return s.CreateTableInGroup(ctx, account, name, RangeGroup{})
}

// CreateTableInGroup creates a table as CreateTable does, and records in
// its catalog entry the range group that replicates its entities (none
// when g is zero).
func (s *Store) CreateTableInGroup(ctx context.Context, account, name string, g RangeGroup) (Table, error) {
	if err := ctx.Err(); err != nil {
		return Table{}, err
	}
	if err := ValidateTableName(name); err != nil {
		return Table{}, err
	}
	s.catMu.Lock()
	defer s.catMu.Unlock()
	key := tableKey{account, strings.ToLower(name)}
	switch _, err := s.db.Get(catalogKey(account, key.lower)); {
	case err == nil:
		return Table{}, serviceError(CodeTableAlreadyExists, msgTableAlreadyExists)
	case !errors.Is(err, lsm.ErrNotFound):
		return Table{}, fmt.Errorf("partition: create table %q: read its catalog entry: %w", name, err)
	}
	id := s.nextID
	t := newTable(account, name, id)
	var groups []RangeGroup
	if g.ID != 0 {
		groups = []RangeGroup{{ID: g.ID, Voters: g.Voters}}
	}
	t.setGroups(groups)
	rs := []*rangeState{{born: s.tick.Load()}}
	t.ranges.Store(&rs)

	b := s.db.NewBatch()
	b.Set(catalogKey(account, key.lower), encodeCatalogValue(id, groups, name))
	indexGroups(b, account, key.lower, nil, groups)
	if g.ID != 0 {
		setAppliedIndex(b, g.ID, GroupStartIndex)
	}
	b.Set(metaKey(metaNextID), appendUint64(nil, id+1))
	b.Set(idKey(nsRanges, id), encodeRangeMap(rs))
	if err := s.db.Apply(b, s.writeOptions(ctx, b)); err != nil {
		return Table{}, fmt.Errorf("partition: create table %q: %w", name, err)
	}
	s.nextID = id + 1
	s.counters.tables.Add(1)
	s.counters.ranges.Add(1)
	t.lastUse.Store(int64(time.Since(s.born))) // not the first to close
	s.openLocked(t)
	return Table{Name: name}, nil
}

// DeleteTable drops a table at once: its catalog entry goes, its id is
// recorded as dropped (so no read finds its entities and flushes and
// compactions discard them), and a background compaction reclaims the
// space. The name is free again immediately.
func (s *Store) DeleteTable(ctx context.Context, account, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.catMu.Lock()
	defer s.catMu.Unlock()
	t, err := s.acquireTableLocked(tableKey{account, strings.ToLower(name)})
	if err != nil {
		return err
	}
	defer t.release()
	b := s.db.NewBatch()
	b.Delete(catalogKey(account, t.lower))
	indexGroups(b, account, t.lower, t.rangeGroups(), nil)
	b.Delete(idKey(nsRanges, t.id))
	b.Delete(idKey(nsACL, t.id))
	b.Set(idKey(nsDeleted, t.id), encodeDeletedValue(deletedPending, account))
	if err := s.db.Apply(b, s.writeOptions(ctx, b)); err != nil {
		return fmt.Errorf("partition: delete table %q: %w", name, err)
	}
	// Only now that the drop is durable may DropKey discard the keys.
	// Under t.mu, so that no split or merge changes the count of its
	// ranges once they are taken off the store's.
	t.mu.Lock()
	t.deleted.Store(true)
	s.counters.ranges.Add(-int64(len(t.rangeList())))
	t.mu.Unlock()
	s.counters.tables.Add(-1)
	s.forgetLocked(t)
	s.markDeleted(t.id)
	s.queueDrop(droppedTable{account: account, id: t.id})
	return nil
}

// GetTable returns the table called name (in any case), as it was created.
func (s *Store) GetTable(ctx context.Context, account, name string) (Table, error) {
	if err := ctx.Err(); err != nil {
		return Table{}, err
	}
	t, err := s.acquireTable(account, name)
	if err != nil {
		return Table{}, err
	}
	defer t.release()
	return Table{Name: t.name}, nil
}

// QueryTables lists an account's tables in order of their lower-case names,
// filtered by q.Filter (comparisons on TableName are ordinal on the name as
// created), one page at a time.
func (s *Store) QueryTables(ctx context.Context, account string, q TableQuery) (TablePage, error) {
	top, err := pageSize(q.Top)
	if err != nil {
		return TablePage{}, err
	}
	plan, err := odata.PlanTableQuery(q.Filter)
	if err != nil {
		return TablePage{}, err
	}
	lower := catalogPrefix(account)
	upper := prefixSuccessor(lower)
	if q.NextTableName != "" {
		next, err := DecodeNextTableName(q.NextTableName)
		if err != nil {
			return TablePage{}, err
		}
		lower = catalogKey(account, strings.ToLower(next))
	}
	var page TablePage
	if len(plan.Ranges) == 0 {
		return page, nil
	}
	it := s.db.NewIter(&lsm.IterOptions{LowerBound: lower, UpperBound: upper})
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if n++; n%64 == 0 {
			if err := ctx.Err(); err != nil {
				it.Close()
				return TablePage{}, err
			}
		}
		_, _, name, err := decodeCatalogValue(it.Value())
		if err != nil {
			it.Close()
			return TablePage{}, err
		}
		if !tableMatches(plan, name) {
			continue
		}
		if len(page.Tables) == top {
			page.NextTableName = EncodeNextTableName(name)
			break
		}
		page.Tables = append(page.Tables, Table{Name: name})
	}
	if err := it.Close(); err != nil {
		return TablePage{}, fmt.Errorf("partition: query tables: %w", err)
	}
	return page, nil
}

func tableMatches(plan *odata.TablePlan, name string) bool {
	for _, r := range plan.Ranges {
		if r.Contains(name) {
			return plan.Match(name)
		}
	}
	return false
}

// pageSize turns a requested page size into the one used: 0 is the
// default (and largest) page, 1,000.
func pageSize(top int) (int, error) {
	switch {
	case top < 0:
		return 0, serviceErrorf(odata.CodeInvalidInput, msgInvalidInput, "($top %d is negative)", top)
	case top == 0 || top > odata.MaxTop:
		return odata.MaxTop, nil
	}
	return top, nil
}
