package main

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Engine is what a workload needs of a key-value store. Each adapter maps it
// onto its engine's own API without extra copies or locks, so that the
// harness costs every engine the same.
type Engine interface {
	// Set writes one key; sync makes it durable before returning.
	Set(key, value []byte, sync bool) error
	// Delete removes one key.
	Delete(key []byte, sync bool) error
	// Get looks key up and, if present, calls fn with its value, which is
	// only valid during the call (so engines that can lend their buffer are
	// not charged for a copy). It returns whether the key was found.
	Get(key []byte, fn func(value []byte)) (bool, error)
	// NewBatch returns an empty batch bound to the engine.
	NewBatch() Batch
	// Scan visits up to limit entries in key order from the first key >=
	// start, through a fresh iterator, and returns how many it visited.
	Scan(start []byte, limit int, fn func(key, value []byte)) (int, error)
	// Settle brings the engine to a fixed, comparable shape before reads:
	// memtables flushed and the whole key space manually compacted, so no
	// background work runs during the measured phase.
	Settle() error
	// Stats returns the engine's own counters, cheap to collect, for the
	// raw results.
	Stats() any
	// Close closes the engine.
	Close() error
}

// stallReporter is an Engine that counts its write stalls: the times it
// held writers back for flushes or compactions, and the longest, since it
// opened.
type stallReporter interface {
	Stalls() (count int64, longest time.Duration)
}

// Batch is a write batch.
type Batch interface {
	Set(key, value []byte)
	// Apply commits the batch atomically and empties it for reuse.
	Apply(sync bool) error
}

// EngineConfig holds the settings every engine gets alike; RESULTS.md lists
// how each adapter maps them and what stays at each engine's default.
type EngineConfig struct {
	MemTableSize    int64 // memtable / write buffer
	CacheSize       int64 // block cache
	BloomBitsPerKey int   // on every level
	BlockSize       int   // uncompressed data block size
	LBaseMaxBytes   int64 // target size of the first level below L0
	TargetFileSize  int64 // compaction output file size where configurable
}

// defaultEngineConfig is the configuration of the published runs.
func defaultEngineConfig() EngineConfig {
	return EngineConfig{
		MemTableSize:    64 << 20,
		CacheSize:       64 << 20,
		BloomBitsPerKey: 10,
		BlockSize:       4 << 10,
		LBaseMaxBytes:   64 << 20,
		TargetFileSize:  4 << 20,
	}
}

// engineNames lists the default engines in the order a repeat runs them.
func engineNames() []string { return []string{"tabula", "pebble", "goleveldb"} }

// knownEngines adds the variants one can ask for with -engines.
func knownEngines() []string { return append(engineNames(), "pebble-l6filters") }

// openEngine opens (creating) the named engine in dir.
func openEngine(name, dir string, cfg EngineConfig) (Engine, error) {
	switch name {
	case "tabula":
		return openTabula(dir, cfg)
	case "pebble":
		return openPebble(dir, cfg, false)
	case "pebble-l6filters":
		return openPebble(dir, cfg, true)
	case "goleveldb":
		return openGoleveldb(dir, cfg)
	}
	return nil, fmt.Errorf("unknown engine %q (have %v)", name, knownEngines())
}

// checkEngines validates a list of engine names.
func checkEngines(names []string) error {
	if len(names) == 0 {
		return errors.New("no engines selected")
	}
	for _, n := range names {
		if !slices.Contains(knownEngines(), n) {
			return fmt.Errorf("unknown engine %q (have %v)", n, knownEngines())
		}
	}
	return nil
}
