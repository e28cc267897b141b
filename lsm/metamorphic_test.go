package lsm

import (
	"flag"
	"testing"

	"github.com/tabuladb/tabula/vfs"
)

var metamorphicOps = flag.Int("metamorphic-ops", 1500, "operations per option set in TestMetamorphic")

// TestMetamorphic runs one random operation trace (the model test's:
// sets, deletes, batches, snapshot reads, bounded iteration both ways,
// flushes, compactions, reopens) under option sets that change how the
// engine lays data out — memtable size, filters, compression, block size,
// level shape, caches, open-table bound — and checks every result against
// the same model, so all of them agree with it and with each other. The
// in-memory filesystem keeps it fast enough to run the whole trace.
func TestMetamorphic(t *testing.T) {
	variants := []struct {
		name string
		edit func(*Options)
	}{
		{"small", func(*Options) {}},
		{"tiny memtable", func(o *Options) { o.MemTableSize = 4 << 10 }},
		{"no bloom filter", func(o *Options) { o.BloomBitsPerKey = -1 }},
		{"zstd", func(o *Options) { o.Compression = ZstdCompression }},
		{"no compression", func(o *Options) { o.Compression = NoCompression }},
		{"tiny blocks", func(o *Options) { o.BlockSize = 64 }},
		{"tiny levels", func(o *Options) {
			o.LBaseMaxBytes, o.TargetFileSize, o.LevelMultiplier = 8<<10, 2<<10, 2
		}},
		{"tiny cache, two open tables", func(o *Options) { o.CacheSize, o.MaxOpenFiles = 1<<10, 2 }},
		{"no background compactions", func(o *Options) { o.DisableBackgroundCompactions = true }},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			opts := smallOptions()
			opts.FS = vfs.NewMem()
			v.edit(opts)
			runModel(t, 11, *metamorphicOps, opts)
		})
	}
}
