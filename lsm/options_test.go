package lsm

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/vfs"
)

// TestOpenRefusesOptionsOutOfRange opens a DB with each field out of its
// range: Open fails with ErrInvalidOptions naming the field, before it
// touches the disk. A memtable of 4 GiB or more panicked in the memtable
// package, a block size above the sstable limit failed the first flush
// and stopped every write, and the rest were read as something else (a
// negative threshold as 0, an unknown compression as the default).
func TestOpenRefusesOptionsOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		field string
		opts  Options
	}{
		{"MemTableSize", Options{MemTableSize: -1}},
		{"MemTableSize", Options{MemTableSize: MaxMemTableSize + 1}},
		{"MemTableStopWritesThreshold", Options{MemTableStopWritesThreshold: -1}},
		{"BloomBitsPerKey", Options{BloomBitsPerKey: maxBloomBitsPerKey + 1}},
		{"MaxOpenFiles", Options{MaxOpenFiles: -5}},
		{"BlockSize", Options{BlockSize: -1}},
		{"BlockSize", Options{BlockSize: 64 << 20}},
		{"Compression", Options{Compression: ZstdCompression + 1}},
		{"L0CompactionThreshold", Options{L0CompactionThreshold: -1}},
		{"L0StopWritesThreshold", Options{L0StopWritesThreshold: -2}},
		{"L0SlowdownWritesThreshold", Options{L0SlowdownWritesThreshold: -2}},
		{"TargetFileSize", Options{TargetFileSize: -1}},
		{"LevelMultiplier", Options{LevelMultiplier: 1}},
		{"LBaseMaxBytes", Options{LBaseMaxBytes: -1}},
		{"LBaseMaxBytes", Options{LBaseMaxBytes: math.MaxInt64 / 1000}},
	} {
		fs := vfs.NewMem()
		tc.opts.FS = fs
		if err := tc.opts.Validate(); !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Validate %+v: %v, want ErrInvalidOptions naming %s", tc.opts, err, tc.field)
		}
		db, err := Open("/db", &tc.opts)
		if err == nil {
			db.Close()
			t.Fatalf("Open with %s out of range: no error", tc.field)
		}
		if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Open with %s out of range: %v, want ErrInvalidOptions naming it", tc.field, err)
		}
		if _, err := fs.Stat("/db"); err == nil {
			t.Errorf("Open with %s out of range created its directory", tc.field)
		}
	}

	// The documented meanings of zero and negative values stay valid.
	for _, o := range []*Options{
		nil,
		{},
		{CacheSize: -1, BloomBitsPerKey: -1, InitialMemTableSize: -1, RecycledWALSegments: -1},
		{MemTableSize: MaxMemTableSize, BlockSize: 32 << 20, BloomBitsPerKey: maxBloomBitsPerKey},
		{MemTableSize: 1, MaxOpenFiles: 1, L0CompactionThreshold: 1, L0StopWritesThreshold: 1, LevelMultiplier: 2},
	} {
		if err := o.Validate(); err != nil {
			t.Errorf("Validate %+v: %v", o, err)
		}
	}
}
