package main

import (
	"errors"
	"time"

	"github.com/tabuladb/tabula/lsm"
)

// tabulaEngine adapts Tabula's lsm.DB. Compression stays at Tabula's
// default, S2 (the peers use Snappy: see RESULTS.md).
type tabulaEngine struct {
	db *lsm.DB
	// Preallocated options: a nil *WriteOptions means synced in lsm.
	noSync, sync *lsm.WriteOptions
}

func openTabula(dir string, cfg EngineConfig) (*tabulaEngine, error) {
	db, err := lsm.Open(dir, &lsm.Options{
		MemTableSize:    cfg.MemTableSize,
		CacheSize:       cfg.CacheSize,
		BloomBitsPerKey: cfg.BloomBitsPerKey,
		BlockSize:       cfg.BlockSize,
		LBaseMaxBytes:   cfg.LBaseMaxBytes,
		TargetFileSize:  cfg.TargetFileSize,
		Compression:     lsm.DefaultCompression,
	})
	if err != nil {
		return nil, err
	}
	return &tabulaEngine{
		db:     db,
		noSync: &lsm.WriteOptions{Sync: false},
		sync:   &lsm.WriteOptions{Sync: true},
	}, nil
}

func (e *tabulaEngine) wo(sync bool) *lsm.WriteOptions {
	if sync {
		return e.sync
	}
	return e.noSync
}

func (e *tabulaEngine) Set(key, value []byte, sync bool) error {
	return e.db.Set(key, value, e.wo(sync))
}

func (e *tabulaEngine) Delete(key []byte, sync bool) error {
	return e.db.Delete(key, e.wo(sync))
}

// Get reads in place (GetFunc), as the peers' adapters do: Pebble's Get
// returns the value aliasing its memory until the closer is closed.
func (e *tabulaEngine) Get(key []byte, fn func([]byte)) (bool, error) {
	err := e.db.GetFunc(key, fn)
	if errors.Is(err, lsm.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (e *tabulaEngine) NewBatch() Batch {
	return &tabulaBatch{e: e, b: e.db.NewBatch()}
}

type tabulaBatch struct {
	e *tabulaEngine
	b *lsm.Batch
}

func (b *tabulaBatch) Set(key, value []byte) { b.b.Set(key, value) }

func (b *tabulaBatch) Apply(sync bool) error {
	err := b.e.db.Apply(b.b, b.e.wo(sync))
	b.b.Reset()
	return err
}

func (e *tabulaEngine) Scan(start []byte, limit int, fn func(k, v []byte)) (int, error) {
	it := e.db.NewIter(nil)
	n := 0
	for ok := it.SeekGE(start); ok && n < limit; ok = it.Next() {
		fn(it.Key(), it.Value())
		n++
	}
	return n, it.Close()
}

// Settle uses Compact, which flushes the memtables first.
func (e *tabulaEngine) Settle() error { return e.db.Compact(nil, nil) }

// Stats returns the DB's metrics; a pointer, whose String tail prints.
func (e *tabulaEngine) Stats() any {
	m := e.db.Metrics()
	return &m
}

func (e *tabulaEngine) Stalls() (int64, time.Duration) {
	m := e.db.Metrics()
	return m.Stall.Count, m.Stall.Longest
}

func (e *tabulaEngine) Close() error { return e.db.Close() }

func (e *tabulaEngine) Shape() lsmShape {
	m := e.db.Metrics()
	return lsmShape{Debt: m.Compaction.Debt, L0Files: int64(m.Levels[0].Files), Compacting: int64(m.Compaction.Running)}
}
