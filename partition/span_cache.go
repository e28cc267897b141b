package partition

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/tabuladb/tabula/lsm"
)

// The span records of range groups (group_span.go) are read on every
// command a group applies (GroupHolds), so they are cached: a read of
// the engine per command was a fifth of a replica's apply. The cache
// holds at most about Options.SpanCacheSize groups, so that a node's
// memory does not grow with the groups it ever held: a group's entry says
// what its record is, or that it has none (a table's first group that
// never split, the common case), and one missing is read from the engine
// and cached.
//
// Fills and writes are ordered by spanCache.mu: a writer applies its
// batch and caches what it wrote under the lock, and a fill reads the
// engine and caches what it read under it, so a fill never caches a
// record older than one a writer cached. Lookups that hit take no lock,
// as before. Dropping an entry is always safe: the next lookup reads the
// engine. The frozen records are counted as writers change them, from
// the record each replaces, so no walk of every record is needed.

// spanCache is the store's cache of span records.
type spanCache struct {
	entries sync.Map // group → *spanEntry
	count   atomic.Int64
	limit   int
	// mu orders fills, writers and sweeps (above).
	mu sync.Mutex
	// frozen counts the frozen records in the engine (under mu; read
	// without it by HasFrozen).
	frozen atomic.Int64
}

// spanEntry is one group's cached record.
type spanEntry struct {
	g groupSpan
	// recorded is false for a group with no record in the engine.
	recorded bool
	// used is set by every lookup and cleared by a sweep: a sweep drops
	// the entries unused since the one before.
	used atomic.Bool
}

// cachedSpan returns group's record as cached: recorded says whether the
// engine has one, and cached whether the cache knew.
func (s *Store) cachedSpan(group uint64) (g groupSpan, recorded, cached bool) {
	v, ok := s.spans.entries.Load(group)
	if !ok {
		return groupSpan{}, false, false
	}
	e := v.(*spanEntry)
	if !e.used.Load() {
		e.used.Store(true)
	}
	return e.g, e.recorded, true
}

// spanRecord returns group's span record, if it has one: from the cache,
// or read from the engine and cached.
func (s *Store) spanRecord(group uint64) (groupSpan, bool, error) {
	if g, recorded, cached := s.cachedSpan(group); cached {
		return g, recorded, nil
	}
	s.spans.mu.Lock()
	defer s.spans.mu.Unlock()
	g, recorded, err := s.spanRecordLocked(group)
	if err != nil {
		return groupSpan{}, false, err
	}
	s.cacheSpanLocked(group, g, recorded)
	return g, recorded, nil
}

// spanRecordLocked is spanRecord under spans.mu, without caching what it
// reads.
func (s *Store) spanRecordLocked(group uint64) (groupSpan, bool, error) {
	if g, recorded, cached := s.cachedSpan(group); cached {
		return g, recorded, nil
	}
	v, err := s.db.Get(groupMetaKey(metaGroupSpan, group))
	switch {
	case errors.Is(err, lsm.ErrNotFound):
		return groupSpan{}, false, nil
	case err != nil:
		return groupSpan{}, false, fmt.Errorf("partition: read the span record of group %d: %w", group, err)
	}
	g, err := decodeGroupSpan(v)
	if err != nil {
		return groupSpan{}, false, fmt.Errorf("partition: span record of group %d: %w", group, err)
	}
	return g, true, nil
}

// cacheSpanLocked caches group's record (none if !recorded), under
// spans.mu, and sweeps the cache once it holds an eighth more entries
// than its limit.
func (s *Store) cacheSpanLocked(group uint64, g groupSpan, recorded bool) {
	e := &spanEntry{g: g, recorded: recorded}
	e.used.Store(true)
	if _, had := s.spans.entries.Swap(group, e); !had {
		s.spans.count.Add(1)
	}
	if limit := s.spans.limit; s.spans.count.Load() > int64(limit+limit/8) {
		s.sweepSpansLocked()
	}
}

// sweepSpansLocked drops the entries unused since the last sweep, and
// clears the others' marks; if that leaves more than the limit, a second
// pass drops those unused since the first, down to the limit.
func (s *Store) sweepSpansLocked() {
	for pass := 0; pass < 2 && s.spans.count.Load() > int64(s.spans.limit); pass++ {
		s.spans.entries.Range(func(k, v any) bool {
			if e := v.(*spanEntry); !e.used.Swap(false) {
				s.spans.entries.Delete(k)
				s.spans.count.Add(-1)
			}
			return s.spans.count.Load() > int64(s.spans.limit)
		})
	}
}

// spanChange is a change of one group's span record: its new record, or
// its deletion.
type spanChange struct {
	group   uint64
	g       groupSpan
	deleted bool
}

// commitSpans applies b, which writes the span records changes name
// (and anything else), and then caches them, in their order: a lookup
// without a lock sees one change, then the next. The frozen count
// follows, from the records they replace: the engine's, or an earlier
// change's of the same group.
func (s *Store) commitSpans(b *lsm.Batch, wo *lsm.WriteOptions, changes ...spanChange) error {
	s.spans.mu.Lock()
	defer s.spans.mu.Unlock()
	var frozen int64
	wasFrozen := make(map[uint64]bool, len(changes)) // by group, as the changes so far leave it
	for _, c := range changes {
		was, seen := wasFrozen[c.group]
		if !seen {
			old, recorded, err := s.spanRecordLocked(c.group)
			if err != nil {
				return err
			}
			was = recorded && old.frozen
		}
		now := !c.deleted && c.g.frozen
		if was {
			frozen--
		}
		if now {
			frozen++
		}
		wasFrozen[c.group] = now
	}
	if err := s.db.Apply(b, wo); err != nil {
		return err
	}
	for _, c := range changes {
		s.cacheSpanLocked(c.group, c.g, !c.deleted)
	}
	s.spans.frozen.Add(frozen)
	return nil
}

// loadSpans counts the frozen span records, as the store opens; the
// cache fills as groups are looked up.
func (s *Store) loadSpans() error {
	var frozen int64
	err := s.scanGroupSpans(func(_ uint64, g groupSpan) error {
		if g.frozen {
			frozen++
		}
		return nil
	})
	s.spans.frozen.Store(frozen)
	return err
}

// HasFrozen says whether the store holds a frozen span.
func (s *Store) HasFrozen() bool { return s.spans.frozen.Load() > 0 }
