package lsm

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/tabuladb/tabula/internal/base"
)

// compactLoop runs automatic compactions, one at a time. Its thread keeps
// the process's CPU priority. Lowering it (as RocksDB can lower its
// compaction pool's) was tried, in ae0338a: on two cores, a fill of 20M
// keys spent half as long with its writer preempted by compactions, but
// twice as long asleep in the L0 slowdown (slowdown.go) that compactions
// falling behind then caused, with a worse p99.9 and no faster fill.
func (db *DB) compactLoop() {
	defer db.bgWG.Done()
	for {
		select {
		case <-db.closing:
			return
		case <-db.compactSignal:
		}
		for db.maybeCompact() {
		}
	}
}

// maybeCompact runs one automatic compaction if one is needed and none is
// running. It returns whether it ran one successfully.
func (db *DB) maybeCompact() bool {
	db.mu.Lock()
	if db.opts.DisableBackgroundCompactions || db.compacting || db.bgErr != nil || db.closed.Load() {
		db.mu.Unlock()
		return false
	}
	c := db.pickCompaction()
	if c == nil {
		db.mu.Unlock()
		return false
	}
	db.compacting = true
	c.setCompacting(true)
	db.mu.Unlock()
	return db.runCompaction(c) == nil
}

// runCompaction executes c and installs its result. It clears
// db.compacting when done.
func (db *DB) runCompaction(c *compaction) error {
	start := time.Now()
	edit := &versionEdit{}
	for i, files := range c.inputs {
		level := c.level
		if i == 1 {
			level = c.outputLevel
		}
		for _, f := range files {
			edit.deleted = append(edit.deleted, deletedFileEntry{level: level, fileNum: f.fileNum})
		}
	}
	var (
		outputs []*fileMetadata
		err     error
	)
	if c.trivialMove {
		outputs = c.inputs[0]
	} else {
		db.mu.Lock()
		snapshots := db.compactionSnapshots()
		db.mu.Unlock()
		outputs, err = db.compactTables(c, snapshots)
	}
	for _, m := range outputs {
		edit.added = append(edit.added, newFileEntry{level: c.outputLevel, meta: m})
	}

	db.mu.Lock()
	defer db.mu.Unlock()
	if err == nil {
		err = db.versions.logAndApply(edit)
		if err != nil && !c.trivialMove && !errors.Is(err, errEditUncertain) {
			db.removeTables(outputs)
		}
	}
	c.setCompacting(false)
	db.compacting = false
	c.version.unref()
	db.cond.Broadcast()
	if err != nil {
		if err != ErrClosed {
			db.setBGErr(fmt.Errorf("lsm: compaction L%d->L%d: %w", c.level, c.outputLevel, err))
		}
		return err
	}
	c.outputs = outputs
	db.updateReadState()
	db.metrics.recordCompaction(c, outputs, time.Since(start))
	return nil
}

// compactTables merges the inputs of c into new tables.
func (db *DB) compactTables(c *compaction, snapshots []base.SeqNum) ([]*fileMetadata, error) {
	var iters []base.InternalIterator
	var entries []*tableCacheEntry
	defer func() {
		for _, it := range iters {
			it.Close()
		}
		for _, e := range entries {
			db.tableCache.release(e)
		}
	}()
	if c.level == 0 {
		for _, f := range c.inputs[0] {
			r, e, err := db.tableCache.acquire(f)
			if err != nil {
				return nil, err
			}
			entries = append(entries, e)
			iters = append(iters, r.NewCompactionIter())
		}
	} else {
		iters = append(iters, newCompactionLevelIter(db.tableCache, c.inputs[0]))
	}
	if len(c.inputs[1]) > 0 {
		iters = append(iters, newCompactionLevelIter(db.tableCache, c.inputs[1]))
	}
	merged := newMergingIter(iters)
	ci := newCompactionIter(merged, snapshots, baseLevelChecker(c.version, c.outputLevel+1), db.opts.DropKey)
	var lim *tableWriterLimits
	if len(c.grandparents) > 0 {
		lim = &tableWriterLimits{grandparents: c.grandparents, maxGrandparentBytes: db.maxGrandparentBytes()}
	}
	// The merging iterator owns the input iterators from here on.
	iters = nil
	defer merged.Close()
	return db.writeTables(ci, db.opts.TargetFileSize, lim, nil)
}

// Compact compacts the key range [start, end) (nil = unbounded) down the
// levels: memtables are flushed, then each level from L0 down that holds
// keys of the range is merged into the next, until no table of the range
// is left that Compact did not write, so that afterwards all of the
// range's data has been rewritten, as a rule into one level, with deleted
// and overwritten versions dropped (except what live snapshots still see)
// and the keys DropKey drops gone.
func (db *DB) Compact(start, end []byte) error {
	if start != nil && end != nil && bytes.Compare(start, end) >= 0 {
		return nil
	}
	if err := db.Flush(); err != nil {
		return err
	}
	// Compact goes on down while a level at or below its step holds a
	// table of the range that it did not write itself. Comparing with the
	// deepest level seen at the start would not do: an automatic compaction
	// between two steps (a trivial move above all) may move a table below
	// it, and that table would keep what DropKey drops. overlapping() takes
	// an inclusive end; compacting a little more than asked is harmless.
	written := map[uint64]bool{}
	for level := 0; level < NumLevels; level++ {
		if db.beforeCompactStep != nil {
			db.beforeCompactStep(level)
		}
		db.mu.Lock()
		for db.compacting {
			db.cond.Wait()
		}
		if err := db.writeErrLocked(); err != nil {
			db.mu.Unlock()
			return err
		}
		v := db.versions.current
		if !v.holdsOthers(level, start, end, written) {
			db.mu.Unlock()
			break
		}
		inputs := v.overlapping(level, start, end)
		if len(inputs) == 0 {
			db.mu.Unlock()
			continue
		}
		// Never a trivial move: the point is to rewrite the data, dropping
		// what no reader can see. The deepest level's data moves one level
		// down (L6 is rewritten in place).
		c := db.newCompaction(v, level, inputs)
		c.manual = true
		db.compacting = true
		c.setCompacting(true)
		db.mu.Unlock()
		if err := db.runCompaction(c); err != nil {
			return err
		}
		for _, f := range c.outputs {
			written[f.fileNum] = true
		}
	}
	signal(db.compactSignal)
	return nil
}
