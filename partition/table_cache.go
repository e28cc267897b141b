package partition

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tabuladb/tabula/lsm"
)

// The open tables.
//
// A table is open while it is in memory: its catalog entry decoded, its
// range map with the ranges' statistics, its lock (table). The catalog on
// disk is the truth; the open tables are a cache over it, so that a
// store's memory does not grow with the number of its tables (or, in a
// cluster, where every node keeps the whole catalog, with the ranges of
// the whole cluster). Every use of a table pins it (acquireTable, then
// release): a pinned table is never closed, so two users of one table
// always share its object, its lock and its statistics. Once more than
// Options.TableCacheSize tables are open, the next table opened closes
// the unpinned ones least recently used, after saving the statistics of
// those written since their last save. A use records its time, to the
// millisecond (so a busy table's record is written once a millisecond,
// not at every use); the maintenance goroutine's pins are not uses.
// Closing a table drops its load averages: least recently used, they are
// the lowest, and a busy table is never the one closed, unless the tables
// used at once are more than the cache holds.
// Opening and closing hold catMu, as catalog edits do, so an edit never
// races with a copy of the entry it changes.

// pin marks t in use, unless it is being closed.
func (t *table) pin() bool {
	for {
		n := t.refs.Load()
		if n < 0 {
			return false
		}
		if t.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// use pins t for a user and records the time of the use; false if t is
// being closed.
func (s *Store) use(t *table) bool {
	if !t.pin() {
		return false
	}
	now := int64(time.Since(s.born))
	if now-t.lastUse.Load() >= int64(time.Millisecond) {
		t.lastUse.Store(now)
	}
	return true
}

// release ends a use that pin (or acquireTable) began.
func (t *table) release() { t.refs.Add(-1) }

// releaseAll releases every table of ts.
func releaseAll(ts []*table) {
	for _, t := range ts {
		t.release()
	}
}

// acquireTable finds a live table and pins it open; the caller releases
// it. A missing table is TableNotFound.
func (s *Store) acquireTable(account, name string) (*table, error) {
	key := tableKey{account, strings.ToLower(name)}
	if t := s.pinOpen(key); t != nil {
		return t, nil
	}
	s.catMu.Lock()
	defer s.catMu.Unlock()
	return s.acquireTableLocked(key)
}

// pinOpen pins the open table of key, or returns nil if it is not open
// (or being closed: it is gone once catMu is free).
func (s *Store) pinOpen(key tableKey) *table {
	v, ok := s.tables.Load(key)
	if !ok {
		return nil
	}
	if t := v.(*table); s.use(t) {
		return t
	}
	return nil
}

// acquireTableLocked is acquireTable for a caller holding catMu: a table
// not open is opened from its catalog entry.
func (s *Store) acquireTableLocked(key tableKey) (*table, error) {
	if t := s.pinOpen(key); t != nil {
		return t, nil
	}
	v, err := s.db.Get(catalogKey(key.account, key.lower))
	if errors.Is(err, lsm.ErrNotFound) {
		return nil, serviceError(CodeTableNotFound, msgTableNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("partition: read the catalog entry of table %q: %w", key.lower, err)
	}
	id, groups, name, err := decodeCatalogValue(v)
	if err != nil {
		return nil, fmt.Errorf("table %q: %w", key.lower, err)
	}
	t := newTable(key.account, name, id)
	t.setGroups(groups)
	rs, err := s.loadRanges(t)
	if err != nil {
		return nil, err
	}
	t.ranges.Store(&rs)
	s.use(t)
	s.openLocked(t)
	return t, nil
}

// openLocked adds t to the open tables, then closes others if too many
// are open. The caller holds catMu (and pins t, or t is new and unused).
func (s *Store) openLocked(t *table) {
	s.tables.Store(tableKey{t.account, t.lower}, t)
	for _, g := range t.rangeGroups() {
		s.groups.Store(g.ID, t)
	}
	s.open++
	s.closeUnusedLocked()
}

// forgetLocked takes t out of the open tables (closed, or dropped). The
// caller holds catMu.
func (s *Store) forgetLocked(t *table) {
	s.tables.Delete(tableKey{t.account, t.lower})
	for _, g := range t.rangeGroups() {
		s.groups.CompareAndDelete(g.ID, t)
	}
	s.open--
}

// closeUnused is closeUnusedLocked for a caller not holding catMu.
func (s *Store) closeUnused() {
	s.catMu.Lock()
	s.closeUnusedLocked()
	s.catMu.Unlock()
}

// closeUnusedLocked closes unpinned tables, least recently used first,
// while more than Options.TableCacheSize are open, down to seven eighths
// of it, so that one sweep serves many opens. Those written since their
// statistics were saved are saved first, in one synced batch. The caller
// holds catMu.
func (s *Store) closeUnusedLocked() {
	limit := s.opts.TableCacheSize
	if s.open <= limit {
		return
	}
	var unpinned []*table
	s.tables.Range(func(_, v any) bool {
		if t := v.(*table); t.refs.Load() == 0 {
			unpinned = append(unpinned, t)
		}
		return true
	})
	slices.SortFunc(unpinned, func(a, b *table) int { return cmp.Compare(a.lastUse.Load(), b.lastUse.Load()) })
	victims := unpinned[:min(len(unpinned), s.open-(limit-limit/8))]
	var unsaved []*table
	for _, t := range victims {
		if t.dirty.Load() {
			unsaved = append(unsaved, t)
		}
	}
	if len(unsaved) > 0 {
		s.noteErr(s.persistRanges(unsaved))
	}
	for _, t := range victims {
		if !t.refs.CompareAndSwap(0, -1) {
			continue // pinned meanwhile
		}
		if t.dirty.Load() {
			t.refs.Store(0) // written since the save, or the save failed
			continue
		}
		s.forgetLocked(t)
	}
}

// acquireGroupTable pins the live table whose catalog entry names range
// group id; ok is false when none does.
func (s *Store) acquireGroupTable(id uint64) (t *table, ok bool, err error) {
	if v, found := s.groups.Load(id); found {
		if t := v.(*table); s.use(t) {
			return t, true, nil
		}
	}
	s.catMu.Lock()
	defer s.catMu.Unlock()
	return s.acquireGroupTableLocked(id)
}

// acquireGroupTableLocked is acquireGroupTable for a caller holding
// catMu: the group's table is found through the group index.
func (s *Store) acquireGroupTableLocked(id uint64) (*table, bool, error) {
	if v, found := s.groups.Load(id); found {
		if t := v.(*table); s.use(t) {
			return t, true, nil
		}
	}
	v, err := s.db.Get(groupMetaKey(metaGroupTable, id))
	if errors.Is(err, lsm.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("partition: read the group index of group %d: %w", id, err)
	}
	account, lower, err := decodeGroupIndexValue(v)
	if err != nil {
		return nil, false, fmt.Errorf("group %d: %w", id, err)
	}
	t, err := s.acquireTableLocked(tableKey{account, lower})
	if err != nil {
		if IsCode(err, CodeTableNotFound) {
			err = fmt.Errorf("partition: the group index names table %q for group %d, which has no catalog entry: %w", lower, id, lsm.ErrCorruption)
		}
		return nil, false, err
	}
	if !hasGroup(t.rangeGroups(), id) {
		t.release()
		return nil, false, fmt.Errorf("partition: the group index names table %q for group %d, whose catalog entry does not: %w", lower, id, lsm.ErrCorruption)
	}
	return t, true, nil
}

func hasGroup(gs []RangeGroup, id uint64) bool {
	return slices.ContainsFunc(gs, func(g RangeGroup) bool { return g.ID == id })
}

// Group index value (docs/keys.md): version 1 | the catalog key of the
// table whose entry names the group.
const groupIndexVersion = 1

func encodeGroupIndexValue(account, lower string) []byte {
	return append([]byte{groupIndexVersion}, catalogKey(account, lower)...)
}

func decodeGroupIndexValue(v []byte) (account, lower string, err error) {
	if len(v) < 1 || v[0] != groupIndexVersion {
		return "", "", fmt.Errorf("partition: group index entry: bad version: %w", lsm.ErrCorruption)
	}
	account, lower, err = decodeCatalogKey(v[1:])
	if err != nil {
		return "", "", fmt.Errorf("partition: group index entry: %w: %w", err, lsm.ErrCorruption)
	}
	return account, lower, nil
}

// indexGroups records in b the group index's changes from a table's
// descriptors old to new.
func indexGroups(b *lsm.Batch, account, lower string, old, new []RangeGroup) {
	for _, g := range old {
		if !hasGroup(new, g.ID) {
			b.Delete(groupMetaKey(metaGroupTable, g.ID))
		}
	}
	for _, g := range new {
		if !hasGroup(old, g.ID) {
			b.Set(groupMetaKey(metaGroupTable, g.ID), encodeGroupIndexValue(account, lower))
		}
	}
}

// catalogEntry is a table's catalog entry as a scan reads it.
type catalogEntry struct {
	account, lower, name string
	id                   uint64
	groups               []RangeGroup
}

// scanCatalog calls fn for every live table's catalog entry, in catalog
// key order (account, then lower-case name), at the current state.
func (s *Store) scanCatalog(fn func(e catalogEntry) error) error {
	return s.scan([]byte{nsCatalog}, []byte{nsCatalog + 1}, func(k, v []byte) error {
		account, lower, err := decodeCatalogKey(k)
		if err != nil {
			return err
		}
		id, groups, name, err := decodeCatalogValue(v)
		if err != nil {
			return fmt.Errorf("table %q: %w", lower, err)
		}
		return fn(catalogEntry{account: account, lower: lower, name: name, id: id, groups: groups})
	})
}
