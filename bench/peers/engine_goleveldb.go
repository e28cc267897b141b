package main

import (
	"errors"
	"time"

	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/filter"
	"github.com/syndtr/goleveldb/leveldb/opt"
	"github.com/syndtr/goleveldb/leveldb/util"
)

// goleveldbEngine adapts goleveldb, the LevelDB port Tabula's formats
// descend from: a second reference point beside Pebble.
type goleveldbEngine struct {
	db           *leveldb.DB
	noSync, sync *opt.WriteOptions
}

func openGoleveldb(dir string, cfg EngineConfig) (*goleveldbEngine, error) {
	db, err := leveldb.OpenFile(dir, &opt.Options{
		WriteBuffer:        int(cfg.MemTableSize),
		BlockCacheCapacity: int(cfg.CacheSize),
		BlockSize:          cfg.BlockSize,
		Filter:             filter.NewBloomFilter(cfg.BloomBitsPerKey),
		Compression:        opt.SnappyCompression,
		// goleveldb's level sizing defaults (10 MiB L1, 2 MiB tables) would
		// make it write far more than the others for reasons of
		// configuration, not design.
		CompactionTotalSize: int(cfg.LBaseMaxBytes),
		CompactionTableSize: int(cfg.TargetFileSize),
	})
	if err != nil {
		return nil, err
	}
	return &goleveldbEngine{
		db:     db,
		noSync: &opt.WriteOptions{Sync: false},
		sync:   &opt.WriteOptions{Sync: true},
	}, nil
}

func (e *goleveldbEngine) wo(sync bool) *opt.WriteOptions {
	if sync {
		return e.sync
	}
	return e.noSync
}

func (e *goleveldbEngine) Set(key, value []byte, sync bool) error {
	return e.db.Put(key, value, e.wo(sync))
}

func (e *goleveldbEngine) Delete(key []byte, sync bool) error {
	return e.db.Delete(key, e.wo(sync))
}

func (e *goleveldbEngine) Get(key []byte, fn func([]byte)) (bool, error) {
	v, err := e.db.Get(key, nil)
	if errors.Is(err, leveldb.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	fn(v)
	return true, nil
}

func (e *goleveldbEngine) NewBatch() Batch {
	return &goleveldbBatch{e: e, b: new(leveldb.Batch)}
}

type goleveldbBatch struct {
	e *goleveldbEngine
	b *leveldb.Batch
}

func (b *goleveldbBatch) Set(key, value []byte) { b.b.Put(key, value) }

func (b *goleveldbBatch) Apply(sync bool) error {
	err := b.e.db.Write(b.b, b.e.wo(sync))
	b.b.Reset()
	return err
}

func (e *goleveldbEngine) Scan(start []byte, limit int, fn func(k, v []byte)) (int, error) {
	it := e.db.NewIterator(nil, nil)
	n := 0
	for ok := it.Seek(start); ok && n < limit; ok = it.Next() {
		fn(it.Key(), it.Value())
		n++
	}
	it.Release()
	return n, it.Error()
}

// Settle uses CompactRange over everything, which compacts the memtable
// first: goleveldb has no separate flush.
func (e *goleveldbEngine) Settle() error { return e.db.CompactRange(util.Range{}) }

// goleveldbStats is the marshalable part of leveldb.DBStats.
type goleveldbStats struct {
	LevelSizes        []int64
	LevelTablesCounts []int
	LevelRead         []int64
	LevelWrite        []int64
	WriteDelayCount   int32
	WriteDelay        time.Duration
	IOWrite, IORead   uint64
	MemComp           uint32
	Level0Comp        uint32
	NonLevel0Comp     uint32
	SeekComp          uint32
}

func (e *goleveldbEngine) Stats() any {
	var s leveldb.DBStats
	if err := e.db.Stats(&s); err != nil {
		return map[string]string{"error": err.Error()}
	}
	return goleveldbStats{
		LevelSizes:        s.LevelSizes,
		LevelTablesCounts: s.LevelTablesCounts,
		LevelRead:         s.LevelRead,
		LevelWrite:        s.LevelWrite,
		WriteDelayCount:   s.WriteDelayCount,
		WriteDelay:        s.WriteDelayDuration,
		IOWrite:           s.IOWrite,
		IORead:            s.IORead,
		MemComp:           s.MemComp,
		Level0Comp:        s.Level0Comp,
		NonLevel0Comp:     s.NonLevel0Comp,
		SeekComp:          s.SeekComp,
	}
}

func (e *goleveldbEngine) Close() error { return e.db.Close() }
