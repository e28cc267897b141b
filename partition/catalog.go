package partition

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/odata"
)

// table is an open table: its identity, its key prefix and its range
// partitions. The catalog keeps one per live table.
type table struct {
	account string
	name    string // as created: names are case-preserving
	lower   string // the catalog key: names are case-insensitive
	id      uint64
	prefix  []byte // appendTablePrefix(account, id); read-only
	// groups are the table's range descriptors, by start, the first from
	// "": empty for a table whose entities have no range group. Replaced
	// whole under the store's catMu (SetGroupVoters, SplitTableRange).
	groups atomic.Pointer[[]RangeGroup]

	// deleted is set when the table is dropped, so that background work
	// holding the table stops persisting things for it.
	deleted atomic.Bool
	// dirty says the range statistics changed since they were persisted;
	// recountDue that they are to be counted again (a missing range map).
	dirty, recountDue atomic.Bool
	// refs counts the table's users (pin, release); -1 while it is being
	// closed. lastUse is when a user last pinned it, in nanoseconds since
	// the store opened (table_cache.go).
	refs    atomic.Int32
	lastUse atomic.Int64

	// mu orders writes against range edits: every write holds it shared
	// from before its commit until its statistics are recorded, and a
	// split, merge or recount holds it exclusively while it takes its
	// snapshot and while it installs new ranges. Reads never take it.
	mu sync.RWMutex
	// ranges is the table's range map, sorted by start, contiguous, the
	// first starting at "" and the last unbounded. Replaced whole (under mu
	// held exclusively), so readers load it without locking.
	ranges atomic.Pointer[[]*rangeState]
}

type tableKey struct{ account, lower string }

func (t *table) rangeList() []*rangeState { return *t.ranges.Load() }

// catalog value: version 1 | table id (8 bytes big-endian) | name as
// created; or, for a table replicated by one range group of its own,
// version 2 | table id | the group (range_group.go) | name; or, for a
// table split into several ranges, version 3 | table id | uvarint count |
// count × (group, string start) | name.
const (
	catalogVersion       = 1
	catalogVersionGroup  = 2
	catalogVersionRanges = 3
)

func encodeCatalogValue(id uint64, groups []RangeGroup, name string) []byte {
	v := make([]byte, 0, 1+idLen+len(name))
	switch len(groups) {
	case 0:
		v = append(v, catalogVersion)
		v = binary.BigEndian.AppendUint64(v, id)
	case 1:
		v = append(v, catalogVersionGroup)
		v = binary.BigEndian.AppendUint64(v, id)
		v = groups[0].append(v)
	default:
		v = append(v, catalogVersionRanges)
		v = binary.BigEndian.AppendUint64(v, id)
		v = binary.AppendUvarint(v, uint64(len(groups)))
		for _, g := range groups {
			v = g.append(v)
			v = binary.AppendUvarint(v, uint64(len(g.Start)))
			v = append(v, g.Start...)
		}
	}
	return append(v, name...)
}

func decodeCatalogValue(v []byte) (id uint64, groups []RangeGroup, name string, err error) {
	if len(v) < 1+idLen || v[0] < catalogVersion || v[0] > catalogVersionRanges {
		return 0, nil, "", fmt.Errorf("partition: catalog entry: bad header: %w", lsm.ErrCorruption)
	}
	bad := func(what string) (uint64, []RangeGroup, string, error) {
		return 0, nil, "", fmt.Errorf("partition: catalog entry: %s: %w", what, lsm.ErrCorruption)
	}
	id, rest := binary.BigEndian.Uint64(v[1:]), v[1+idLen:]
	switch v[0] {
	case catalogVersionGroup:
		var g RangeGroup
		if g, rest, err = decodeRangeGroup(rest); err != nil {
			return 0, nil, "", fmt.Errorf("partition: catalog entry: %w", err)
		}
		groups = []RangeGroup{g}
	case catalogVersionRanges:
		count, n := binary.Uvarint(rest)
		if n <= 0 || count < 2 || count > uint64(len(rest)) {
			return bad("bad range count")
		}
		rest = rest[n:]
		for i := range count {
			var g RangeGroup
			if g, rest, err = decodeRangeGroup(rest); err != nil {
				return 0, nil, "", fmt.Errorf("partition: catalog entry: %w", err)
			}
			l, n := binary.Uvarint(rest)
			if n <= 0 || l > uint64(len(rest)-n) {
				return bad("bad range start")
			}
			g.Start, rest = string(rest[n:n+int(l)]), rest[n+int(l):]
			if (i == 0) != (g.Start == "") || (i > 0 && g.Start <= groups[i-1].Start) {
				return bad("range starts out of order")
			}
			groups = append(groups, g)
		}
	}
	return id, groups, string(rest), nil
}

// deleted-table record: version 1 | state | account.
const (
	deletedVersion   = 1
	deletedPending   = 0 // its key range has not been compacted yet
	deletedCompacted = 1 // a compaction has dropped its keys
)

func encodeDeletedValue(state byte, account string) []byte {
	return append([]byte{deletedVersion, state}, account...)
}

func decodeDeletedValue(v []byte) (byte, string, error) {
	if len(v) < 2 || v[0] != deletedVersion {
		return 0, "", fmt.Errorf("partition: deleted-table record: bad header: %w", lsm.ErrCorruption)
	}
	return v[1], string(v[2:]), nil
}

// isDeleted is the store's view of dropped table ids, read by DropKey from
// the engine's background goroutines.
func (s *Store) isDeleted(id uint64) bool {
	m := s.deleted.Load()
	if m == nil {
		return false
	}
	_, ok := (*m)[id]
	return ok
}

// markDeleted adds id to the dropped set (copy on write: drops are rare and
// DropKey reads it for every key a compaction writes).
func (s *Store) markDeleted(id uint64) {
	for {
		old := s.deleted.Load()
		next := make(map[uint64]struct{}, 1)
		if old != nil {
			for k := range *old {
				next[k] = struct{}{}
			}
		}
		next[id] = struct{}{}
		if s.deleted.CompareAndSwap(old, &next) {
			return
		}
	}
}

// dropKey is the engine's DropKey: the keys of dropped tables (entities,
// and range maps or ACLs that a racing writer stored after the drop) are
// garbage. Table ids are never reused, so the answer never changes back.
func (s *Store) dropKey(key []byte) bool {
	id, ok := entityTableID(key)
	return ok && s.isDeleted(id)
}

// loadCatalog reads the store's bookkeeping at Open: the layout version
// (a store of layout 1 is upgraded: its group index built), the id
// counter, the clock lease, the dropped tables and the numbers of tables
// and ranges. No table is opened (table_cache.go). It returns the ids of
// dropped tables whose space is not yet reclaimed.
func (s *Store) loadCatalog() (pendingDrops []droppedTable, err error) {
	if v, err := s.db.Get(metaKey(metaLayout)); err == nil {
		ver, n := binary.Uvarint(v)
		if n <= 0 || ver < 1 || ver > layoutVersion {
			return nil, fmt.Errorf("partition: store layout version %d, this build reads 1 to %d", ver, layoutVersion)
		}
		if ver < layoutVersion {
			if err := s.buildGroupIndex(); err != nil {
				return nil, err
			}
		}
	} else if !errors.Is(err, lsm.ErrNotFound) {
		return nil, fmt.Errorf("partition: read layout version: %w", err)
	} else if err := s.db.Set(metaKey(metaLayout), binary.AppendUvarint(nil, layoutVersion), s.syncWO); err != nil {
		return nil, fmt.Errorf("partition: write layout version: %w", err)
	}

	s.nextID = 1
	if v, err := s.db.Get(metaKey(metaNextID)); err == nil {
		if len(v) != 8 {
			return nil, fmt.Errorf("partition: next table id: bad value: %w", lsm.ErrCorruption)
		}
		s.nextID = binary.BigEndian.Uint64(v)
	} else if !errors.Is(err, lsm.ErrNotFound) {
		return nil, fmt.Errorf("partition: read next table id: %w", err)
	}

	if v, err := s.db.Get(metaKey(metaClock)); err == nil {
		if len(v) != 8 {
			return nil, fmt.Errorf("partition: clock lease: bad value: %w", lsm.ErrCorruption)
		}
		s.clock.last = odata.DateTime(binary.BigEndian.Uint64(v))
		s.clock.lease = s.clock.last
	} else if !errors.Is(err, lsm.ErrNotFound) {
		return nil, fmt.Errorf("partition: read clock lease: %w", err)
	}

	// Dropped tables first, so that DropKey knows them before anything else.
	err = s.scan([]byte{nsDeleted}, []byte{nsDeleted + 1}, func(k, v []byte) error {
		if len(k) != 1+idLen {
			return fmt.Errorf("partition: deleted-table key %x: %w", k, lsm.ErrCorruption)
		}
		id := binary.BigEndian.Uint64(k[1:])
		state, account, err := decodeDeletedValue(v)
		if err != nil {
			return err
		}
		s.markDeleted(id)
		if state == deletedPending {
			pendingDrops = append(pendingDrops, droppedTable{account: account, id: id})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return pendingDrops, s.countTables()
}

// countTables counts the live tables and their ranges for Stats: a table
// whose range map is missing has one range.
func (s *Store) countTables() error {
	var tables, maps, ranges int64
	err := s.scanCatalog(func(catalogEntry) error {
		tables++
		return nil
	})
	if err != nil {
		return err
	}
	err = s.scan([]byte{nsRanges}, []byte{nsRanges + 1}, func(k, v []byte) error {
		if len(k) != 1+idLen {
			return fmt.Errorf("partition: range map key %x: %w", k, lsm.ErrCorruption)
		}
		if s.isDeleted(binary.BigEndian.Uint64(k[1:])) {
			return nil // written by a writer racing the drop: garbage
		}
		n, err := rangeMapCount(v)
		if err != nil {
			return fmt.Errorf("partition: range map %x: %w", k, err)
		}
		maps++
		ranges += n
		return nil
	})
	if err != nil {
		return err
	}
	s.counters.tables.Store(tables)
	s.counters.ranges.Store(ranges + max(0, tables-maps))
	return nil
}

// buildGroupIndex upgrades a store of layout 1, whose range groups were
// found by opening every table at Open, to layout 2: it records, for
// every group a catalog entry names, the table that names it. The
// entries go in batches, the new layout version with the last, so a
// crash part way leaves layout 1, built again at the next Open.
func (s *Store) buildGroupIndex() error {
	b := s.db.NewBatch()
	flush := func() error {
		if err := s.db.Apply(b, s.syncWO); err != nil {
			return fmt.Errorf("partition: build the group index: %w", err)
		}
		b = s.db.NewBatch()
		return nil
	}
	err := s.scanCatalog(func(e catalogEntry) error {
		indexGroups(b, e.account, e.lower, nil, e.groups)
		if b.Len() >= 10000 {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	b.Set(metaKey(metaLayout), binary.AppendUvarint(nil, layoutVersion))
	return flush()
}

func newTable(account, name string, id uint64) *table {
	return &table{
		account: account,
		name:    name,
		lower:   strings.ToLower(name),
		id:      id,
		prefix:  appendTablePrefix(nil, account, id),
	}
}

// scan calls fn for every key in [lower, upper) at the current state.
func (s *Store) scan(lower, upper []byte, fn func(k, v []byte) error) error {
	it := s.db.NewIter(&lsm.IterOptions{LowerBound: lower, UpperBound: upper})
	for ok := it.First(); ok; ok = it.Next() {
		if err := fn(it.Key(), it.Value()); err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("partition: scan: %w", err)
	}
	return nil
}
