package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
)

// pebbleEngine adapts Pebble. It uses the newest on-disk format (columnar
// blocks), as a new Pebble store would, and Snappy, Pebble's default.
//
// Pebble's Get never consults the bloom filters of L6 tables (by design:
// there they are large and most lookups hit), and a settled DB is all L6.
// The pebble-l6filters variant therefore looks keys up through an
// iterator with UseL6Filters and SeekPrefixGE, Pebble's way to opt in.
type pebbleEngine struct {
	db *pebble.DB
	// l6Filters is set for the pebble-l6filters variant; filterIter are
	// the iterator options its Get uses.
	l6Filters  bool
	filterIter *pebble.IterOptions
	// Write stalls, counted through the event listener, to set beside
	// Tabula's stall metric.
	stalls       atomic.Int64
	stallNanos   atomic.Int64
	stallLongest atomic.Int64
	stallStart   atomic.Int64
}

func openPebble(dir string, cfg EngineConfig, l6Filters bool) (*pebbleEngine, error) {
	e := &pebbleEngine{l6Filters: l6Filters, filterIter: &pebble.IterOptions{UseL6Filters: true}}
	// Pebble charges memtable arenas to its block cache (Cache.Reserve), the
	// mutable memtable's and a spare kept for recycling: sized at CacheSize
	// alone, 64 MiB of cache would hold no blocks at all once memtables reach
	// 64 MiB. Tabula and goleveldb keep memtables outside their caches, so
	// Pebble gets two memtables more, which leaves CacheSize for blocks (its
	// BlockCache.Size metric reaches 64 MiB on readrandom).
	cache := pebble.NewCache(cfg.CacheSize + 2*cfg.MemTableSize)
	// The DB takes its own reference; ours goes once it is open.
	defer cache.Unref()
	opts := &pebble.Options{
		Cache:              cache,
		MemTableSize:       uint64(cfg.MemTableSize),
		LBaseMaxBytes:      cfg.LBaseMaxBytes,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             quietLogger{},
		EventListener: &pebble.EventListener{
			WriteStallBegin: func(pebble.WriteStallBeginInfo) {
				e.stalls.Add(1)
				e.stallStart.Store(time.Now().UnixNano())
			},
			WriteStallEnd: func() {
				if t := e.stallStart.Swap(0); t != 0 {
					d := time.Now().UnixNano() - t
					e.stallNanos.Add(d)
					if d > e.stallLongest.Load() {
						e.stallLongest.Store(d) // the listener's calls do not overlap
					}
				}
			},
		},
	}
	for i := range opts.Levels {
		l := &opts.Levels[i]
		l.BlockSize = cfg.BlockSize
		l.FilterPolicy = bloom.FilterPolicy(cfg.BloomBitsPerKey)
		l.Compression = func() *sstable.CompressionProfile { return sstable.SnappyCompression }
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, err
	}
	e.db = db
	return e, nil
}

// quietLogger drops Pebble's informational messages ("Found 0 WALs" on every
// open) and keeps its errors.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any) {}

func (quietLogger) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pebble: "+format+"\n", args...)
}

func (quietLogger) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pebble: fatal: "+format+"\n", args...)
	os.Exit(2)
}

func pebbleWO(sync bool) *pebble.WriteOptions {
	if sync {
		return pebble.Sync
	}
	return pebble.NoSync
}

func (e *pebbleEngine) Set(key, value []byte, sync bool) error {
	return e.db.Set(key, value, pebbleWO(sync))
}

func (e *pebbleEngine) Delete(key []byte, sync bool) error {
	return e.db.Delete(key, pebbleWO(sync))
}

func (e *pebbleEngine) Get(key []byte, fn func([]byte)) (bool, error) {
	if e.l6Filters {
		return e.getFiltered(key, fn)
	}
	v, closer, err := e.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	fn(v)
	return true, closer.Close()
}

// getFiltered is Get through an iterator that uses every level's filters.
// With the default comparer a key's prefix is the whole key, so
// SeekPrefixGE finds the key itself or nothing.
func (e *pebbleEngine) getFiltered(key []byte, fn func([]byte)) (bool, error) {
	it, err := e.db.NewIter(e.filterIter)
	if err != nil {
		return false, err
	}
	found := it.SeekPrefixGE(key) && bytes.Equal(it.Key(), key)
	if found {
		fn(it.Value())
	}
	return found, it.Close()
}

func (e *pebbleEngine) NewBatch() Batch {
	return &pebbleBatch{e: e, b: e.db.NewBatch()}
}

type pebbleBatch struct {
	e *pebbleEngine
	b *pebble.Batch
}

func (b *pebbleBatch) Set(key, value []byte) {
	// Setting into an unindexed batch only fails on a closed batch.
	_ = b.b.Set(key, value, nil)
}

func (b *pebbleBatch) Apply(sync bool) error {
	err := b.e.db.Apply(b.b, pebbleWO(sync))
	b.b.Reset()
	return err
}

func (e *pebbleEngine) Scan(start []byte, limit int, fn func(k, v []byte)) (int, error) {
	it, err := e.db.NewIter(nil)
	if err != nil {
		return 0, err
	}
	n := 0
	for ok := it.SeekGE(start); ok && n < limit; ok = it.Next() {
		fn(it.Key(), it.Value())
		n++
	}
	return n, it.Close()
}

// Settle flushes, then compacts the whole key space (every benchmark key
// starts with a printable byte, so [0x00, 0xff) covers them all).
func (e *pebbleEngine) Settle() error {
	if err := e.db.Flush(); err != nil {
		return err
	}
	return e.db.Compact(context.Background(), []byte{0x00}, []byte{0xff}, true)
}

// pebbleStats is the part of pebble.Metrics worth keeping: its full struct
// holds histograms that do not marshal.
type pebbleStats struct {
	Levels []pebbleLevel
	Flush  struct {
		Count int64
	}
	Compaction struct {
		Count    int64
		Duration time.Duration
	}
	WAL struct {
		BytesIn, BytesWritten uint64
	}
	BlockCache struct {
		Hits, Misses, Size int64
	}
	// Filter counts bloom filter checks that avoided a data block (Hits)
	// and those that did not (Misses).
	Filter struct {
		Hits, Misses int64
	}
	Stall struct {
		Count    int64
		Duration time.Duration
		Longest  time.Duration
	}
	ReadAmp int
}

type pebbleLevel struct {
	Sublevels       int32
	Files           int64
	Bytes           int64
	BytesIn         uint64
	BytesFlushed    uint64
	BytesCompacted  uint64
	BytesMovedInto  uint64
	TablesCompacted uint64
}

func (e *pebbleEngine) Stats() any {
	m := e.db.Metrics()
	var s pebbleStats
	for _, l := range m.Levels {
		s.Levels = append(s.Levels, pebbleLevel{
			Sublevels:       l.Sublevels,
			Files:           l.TablesCount,
			Bytes:           l.TablesSize,
			BytesIn:         l.TableBytesIn,
			BytesFlushed:    l.TableBytesFlushed,
			BytesCompacted:  l.TableBytesCompacted,
			BytesMovedInto:  l.TableBytesMoved,
			TablesCompacted: l.TablesCompacted,
		})
	}
	s.Flush.Count = m.Flush.Count
	s.Compaction.Count = m.Compact.Count
	s.Compaction.Duration = m.Compact.Duration
	s.WAL.BytesIn = m.WAL.BytesIn
	s.WAL.BytesWritten = m.WAL.BytesWritten
	s.BlockCache.Hits = m.BlockCache.Hits
	s.BlockCache.Misses = m.BlockCache.Misses
	s.BlockCache.Size = m.BlockCache.Size
	s.Filter.Hits = m.Filter.Hits
	s.Filter.Misses = m.Filter.Misses
	s.Stall.Count = e.stalls.Load()
	s.Stall.Duration = time.Duration(e.stallNanos.Load())
	s.Stall.Longest = time.Duration(e.stallLongest.Load())
	s.ReadAmp = m.ReadAmp()
	return s
}

func (e *pebbleEngine) Stalls() (int64, time.Duration) {
	return e.stalls.Load(), time.Duration(e.stallLongest.Load())
}

func (e *pebbleEngine) Close() error { return e.db.Close() }

func (e *pebbleEngine) Shape() lsmShape {
	m := e.db.Metrics()
	return lsmShape{Debt: int64(m.Compact.EstimatedDebt), L0Files: m.Levels[0].TablesCount, Compacting: m.Compact.NumInProgress}
}
