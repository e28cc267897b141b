package partition

import (
	"errors"
	"fmt"
	"time"
)

// tuning holds the store's internal knobs; tests shorten them.
type tuning struct {
	// tick is the maintenance interval (load averages, splits, merges);
	// 0 runs no maintenance goroutine (tests call maintain themselves).
	tick time.Duration
	// persistEvery is how many ticks pass between saves of the range
	// statistics.
	persistEvery int64
	// mergeMinAge is how many ticks a range must have existed before it
	// may merge, so a load split is not undone as soon as the load dips.
	mergeMinAge int64
}

func defaultTuning() tuning {
	return tuning{tick: time.Second, persistEvery: 30, mergeMinAge: 300}
}

// droppedTable is a dropped table whose key range awaits compaction.
type droppedTable struct {
	account string
	id      uint64
}

// run is the maintenance goroutine: every tick it folds the operation
// counts into load averages, then splits or merges ranges that need it and
// now and then persists the statistics.
func (s *Store) run() {
	defer s.wg.Done()
	t := time.NewTicker(s.tune.tick)
	defer t.Stop()
	last := s.opts.Now()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			now := s.opts.Now()
			s.maintain(now.Sub(last))
			last = now
		}
	}
}

// maintain runs one maintenance tick; elapsed is the time since the last.
func (s *Store) maintain(elapsed time.Duration) {
	s.maintMu.Lock()
	defer s.maintMu.Unlock()
	s.tick.Add(1)
	tables := s.openTables()
	for _, t := range tables {
		t.updateRates(elapsed)
	}
	if s.needRecount {
		// The last run did not close cleanly: the persisted counts miss the
		// writes since they were saved. Recount every range once.
		if err := s.recountAll(); err != nil {
			s.noteErr(err)
		} else {
			s.needRecount = false
		}
	}
	for _, t := range tables {
		if t.recountDue.Load() {
			if err := s.recountTable(t); err != nil {
				s.noteErr(err)
			} else {
				t.recountDue.Store(false)
			}
		}
	}
	for _, t := range tables {
		if !t.deleted.Load() {
			s.reshape(t)
		}
	}
	if s.tune.persistEvery > 0 && s.tick.Load()%s.tune.persistEvery == 0 {
		s.noteErr(s.persistRanges(tables))
	}
	releaseAll(tables)
	// Tables pinned at once by more users than the cache holds stay open
	// until the next table opens; the tick closes them if none does.
	s.closeUnused()
}

// reshape makes at most one split or merge in t; it reports whether it did.
func (s *Store) reshape(t *table) bool {
	o := &s.opts
	rs := t.rangeList()
	tick := s.tick.Load()
	for _, r := range rs {
		if r.retry > tick {
			continue // holds one partition: nowhere to split
		}
		// A load split waits until the range's own load has been measured
		// for a while, not inherited; sizes are exact at once.
		if r.bytes.Load() > o.SplitBytes || (r.load() > o.SplitOpsPerSecond && tick-r.born >= splitCooldown) {
			did, err := s.split(t, r)
			s.noteErr(err)
			if did || err != nil {
				return true
			}
		}
	}
	cold := o.SplitOpsPerSecond / 10
	for i := 0; i+1 < len(rs); i++ {
		a, b := rs[i], rs[i+1]
		if tick-a.born < s.tune.mergeMinAge || tick-b.born < s.tune.mergeMinAge {
			continue
		}
		if a.load() < cold && b.load() < cold && a.bytes.Load()+b.bytes.Load() < o.MergeBytes {
			s.noteErr(s.merge(t, i))
			return true
		}
	}
	return false
}

// openTables pins and lists the open tables; the caller releases them.
func (s *Store) openTables() []*table {
	var out []*table
	s.tables.Range(func(_, v any) bool {
		if t := v.(*table); t.pin() {
			out = append(out, t)
		}
		return true
	})
	return out
}

// recountTable counts every range of t again.
func (s *Store) recountTable(t *table) error {
	for _, r := range t.rangeList() {
		if err := s.recount(t, r); err != nil {
			return err
		}
	}
	return nil
}

// recountAll counts every range of every live table again, open or not,
// and saves the counts, a few hundred tables a batch: the tables it opens
// may then close again, so the memory it takes is the cache's.
func (s *Store) recountAll() error {
	var batch []*table
	save := func() error {
		err := s.persistRanges(batch)
		releaseAll(batch)
		batch = batch[:0]
		s.closeUnused()
		return err
	}
	err := s.scanCatalog(func(e catalogEntry) error {
		t, err := s.acquireTable(e.account, e.lower)
		if IsCode(err, CodeTableNotFound) {
			return nil // dropped since the scan began
		}
		if err != nil {
			return err
		}
		batch = append(batch, t)
		if err := s.recountTable(t); err != nil {
			return err
		}
		if len(batch) == 256 {
			return save()
		}
		return nil
	})
	return errors.Join(err, save())
}

// persistRanges saves the range maps (with their counts) of the tables
// written since their last save, in one synced batch.
func (s *Store) persistRanges(tables []*table) error {
	b := s.db.NewBatch()
	var saved []*table
	for _, t := range tables {
		if !t.deleted.Load() && t.dirty.Swap(false) {
			b.Set(idKey(nsRanges, t.id), encodeRangeMap(t.rangeList()))
			saved = append(saved, t)
		}
	}
	if b.Len() == 0 {
		return nil
	}
	if err := s.db.Apply(b, s.syncWO); err != nil {
		for _, t := range saved {
			t.dirty.Store(true)
		}
		return fmt.Errorf("partition: persist range statistics: %w", err)
	}
	return nil
}

// noteErr keeps the first background failure for Close to report (a
// failing disk would otherwise pile up one error a tick).
func (s *Store) noteErr(err error) {
	if err == nil {
		return
	}
	s.errMu.Lock()
	if s.bgErr == nil {
		s.bgErr = err
	}
	s.errMu.Unlock()
}

// reclaim is the compaction goroutine: it compacts the key ranges of
// dropped tables, whose keys DropKey then discards, and records each as
// done so a restart does not compact it again. Drops still queued at Close
// stay pending in their records and are compacted after the next Open.
func (s *Store) reclaim() {
	defer s.wg.Done()
	for {
		select {
		case <-s.stop:
			return
		case <-s.dropSig:
		}
		for {
			select {
			case <-s.stop:
				return
			default:
			}
			s.dropMu.Lock()
			if len(s.dropQ) == 0 {
				s.dropMu.Unlock()
				break
			}
			d := s.dropQ[0]
			s.dropQ = s.dropQ[1:]
			s.dropMu.Unlock()
			s.compactDropped(d)
			s.dropMu.Lock()
			s.dropPending--
			s.dropCond.Broadcast()
			s.dropMu.Unlock()
		}
	}
}

func (s *Store) compactDropped(d droppedTable) {
	prefix := appendTablePrefix(nil, d.account, d.id)
	if err := s.db.Compact(prefix, prefixSuccessor(prefix)); err != nil {
		s.noteErr(fmt.Errorf("partition: compact dropped table %d: %w", d.id, err))
		return
	}
	if err := s.db.Set(idKey(nsDeleted, d.id), encodeDeletedValue(deletedCompacted, d.account), s.syncWO); err != nil {
		s.noteErr(fmt.Errorf("partition: record dropped table %d compacted: %w", d.id, err))
	}
}

// queueDrop hands a dropped table to the compaction goroutine without
// blocking the caller.
func (s *Store) queueDrop(d droppedTable) {
	s.dropMu.Lock()
	s.dropQ = append(s.dropQ, d)
	s.dropPending++
	s.dropMu.Unlock()
	select {
	case s.dropSig <- struct{}{}:
	default: // already signalled
	}
}

// waitDrops waits until every queued drop has been compacted (for tests).
func (s *Store) waitDrops() {
	s.dropMu.Lock()
	for s.dropPending > 0 {
		s.dropCond.Wait()
	}
	s.dropMu.Unlock()
}
