package lsm

import (
	"slices"
)

// compaction is one unit of background work: merge inputs[0] (tables of
// level) with inputs[1] (the tables of outputLevel they overlap) into new
// tables at outputLevel.
type compaction struct {
	level, outputLevel int
	inputs             [2][]*fileMetadata
	// grandparents are the tables of outputLevel+1 the inputs overlap.
	grandparents []*fileMetadata
	// trivialMove: a single input table overlapping nothing below moves to
	// outputLevel by a manifest edit, without rewriting it.
	trivialMove bool
	// version is the version the inputs were picked from (referenced).
	version *version
	manual  bool
	// outputs are the tables the compaction installed (set when it succeeds).
	outputs []*fileMetadata
}

func (c *compaction) allInputs() []*fileMetadata {
	return append(slices.Clone(c.inputs[0]), c.inputs[1]...)
}

func (c *compaction) setCompacting(on bool) {
	for _, f := range c.allInputs() {
		f.compacting = on
	}
}

// levelScores returns each level's need for compaction: L0's table count
// over its threshold, and each deeper level's size over its target. A score
// of 1 or more means the level should be compacted. Called with db.mu held.
func (db *DB) levelScores(v *version) [NumLevels]float64 {
	var scores [NumLevels]float64
	scores[0] = float64(len(v.levels[0])) / float64(db.opts.L0CompactionThreshold)
	for level := 1; level < NumLevels-1; level++ {
		scores[level] = float64(v.levelBytes(level)) / float64(db.opts.levelMaxBytes(level))
	}
	return scores
}

// pickCompaction chooses the most needed compaction, or nil. Called with
// db.mu held and no compaction running.
func (db *DB) pickCompaction() *compaction {
	v := db.versions.current
	scores := db.levelScores(v)
	best, bestScore := -1, 1.0
	for level, s := range scores {
		if s >= bestScore {
			best, bestScore = level, s
		}
	}
	if best < 0 {
		return nil
	}
	var c *compaction
	if best == 0 {
		// Start from the oldest L0 table so that data moves down in the
		// order it was written; overlapping() widens the set to every L0
		// table that shares keys with it.
		oldest := v.levels[0][len(v.levels[0])-1]
		c = db.newCompaction(v, 0, v.overlapping(0, oldest.smallest.UserKey, oldest.largest.UserKey))
	} else {
		c = db.newCompaction(v, best, []*fileMetadata{pickLevelFile(v, best)})
	}
	c.trivialMove = len(c.inputs[0]) == 1 && len(c.inputs[1]) == 0 &&
		sumSizes(c.grandparents) <= db.maxGrandparentBytes()
	return c
}

// pickLevelFile returns the table of level whose compaction rewrites the
// fewest bytes of the next level per byte it moves down.
func pickLevelFile(v *version, level int) *fileMetadata {
	var best *fileMetadata
	var bestRatio float64
	for _, f := range v.levels[level] {
		overlap := sumSizes(v.overlapping(level+1, f.smallest.UserKey, f.largest.UserKey))
		ratio := float64(overlap) / float64(max(f.size, 1))
		if best == nil || ratio < bestRatio {
			best, bestRatio = f, ratio
		}
	}
	return best
}

// newCompaction builds a compaction of inputs from level into level+1 (or
// into level itself for the last level).
func (db *DB) newCompaction(v *version, level int, inputs []*fileMetadata) *compaction {
	c := &compaction{level: level, outputLevel: min(level+1, NumLevels-1), version: v}
	c.inputs[0] = inputs
	smallest, largest := keyRange(inputs)
	if c.outputLevel != level {
		c.inputs[1] = v.overlapping(c.outputLevel, smallest, largest)
		smallest, largest = keyRange(c.inputs[0], c.inputs[1])
	}
	if c.outputLevel+1 < NumLevels {
		c.grandparents = v.overlapping(c.outputLevel+1, smallest, largest)
	}
	v.ref()
	return c
}

func (db *DB) maxGrandparentBytes() int64 { return 10 * db.opts.TargetFileSize }

func sumSizes(files []*fileMetadata) int64 {
	var n int64
	for _, f := range files {
		n += int64(f.size)
	}
	return n
}

// compactionDebt estimates the bytes compactions must still read and
// write before every level is within its target. L0, once it holds
// L0CompactionThreshold tables, moves into L1 whole, rewriting L1 with
// it. Then from L1 down, each level's excess over its target (counting
// what the level above pushes into it) moves one level down, rewriting
// the part of the next level it overlaps, estimated in proportion to the
// two levels' sizes. It is 0 while L0 is under its threshold and every
// other level within its target; otherwise it says how far behind
// compaction is, in bytes. Called with db.mu held.
func (db *DB) compactionDebt(v *version) int64 {
	var debt, incoming int64
	if len(v.levels[0]) >= db.opts.L0CompactionThreshold {
		l0 := v.levelBytes(0)
		debt += l0 + v.levelBytes(1)
		incoming = l0
	}
	for level := 1; level < NumLevels-1; level++ {
		size := v.levelBytes(level) + incoming
		excess := size - db.opts.levelMaxBytes(level)
		if excess <= 0 {
			incoming = 0
			continue
		}
		next := v.levelBytes(level + 1)
		debt += excess + int64(float64(excess)*float64(next)/float64(size))
		incoming = excess
	}
	return debt
}
