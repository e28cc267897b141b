package lsm

import (
	"fmt"
	"testing"

	"github.com/tabuladb/tabula/vfs"
)

// TestMetricsWALSyncs: one synced write at a time gets an fsync of its
// own, so each is a commit group of one; unsynced writes add no fsync.
func TestMetricsWALSyncs(t *testing.T) {
	opts := smallOptions()
	opts.FS = vfs.NewMem()
	db := openTestDB(t, "/db", opts)
	defer db.Close()
	before := db.Metrics().WAL
	if before.GroupSize.Count != 0 || before.SyncLatency.Count != 0 {
		t.Fatalf("a new DB reports fsyncs: %+v %+v", before.GroupSize, before.SyncLatency)
	}
	const synced = 20
	for i := range synced {
		if err := db.Set(fmt.Appendf(nil, "k%03d", i), []byte("v"), nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		if err := db.Set(fmt.Appendf(nil, "u%03d", i), []byte("v"), &WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	m := db.Metrics().WAL
	g := m.GroupSize
	if g.Count != synced || g.Sum != synced || g.Counts[0] != synced || g.Bounds[0] != 1 {
		t.Errorf("group sizes after %d lone synced writes: %+v", synced, g)
	}
	if s := m.SyncLatency; s.Count != synced || s.Sum <= 0 || len(s.Counts) != len(s.Bounds)+1 {
		t.Errorf("fsync latencies after %d synced writes: %+v", synced, s)
	}
	var total uint64
	for _, c := range m.SyncLatency.Counts {
		total += c
	}
	if total != m.SyncLatency.Count {
		t.Errorf("fsync latency buckets hold %d, count says %d", total, m.SyncLatency.Count)
	}
}

// TestCompactionDebt checks the estimate's arithmetic on a hand-built
// version: L0 over its threshold moves into L1 whole, and each level's
// excess moves down, rewriting its share of the next level.
func TestCompactionDebt(t *testing.T) {
	opts := &Options{L0CompactionThreshold: 2, LBaseMaxBytes: 1000, LevelMultiplier: 10}
	db := &DB{opts: opts.withDefaults()}
	files := func(sizes ...uint64) []*fileMetadata {
		var out []*fileMetadata
		for _, s := range sizes {
			out = append(out, &fileMetadata{size: s})
		}
		return out
	}
	for _, c := range []struct {
		name   string
		levels map[int][]*fileMetadata
		want   int64
	}{
		{"empty", nil, 0},
		{"within targets", map[int][]*fileMetadata{0: files(300), 1: files(1000), 2: files(9000)}, 0},
		// L0 (2 tables, 600) into L1 (400): 1,000 read and written; L1
		// then holds 1,000, its target: nothing further.
		{"L0 at its threshold", map[int][]*fileMetadata{0: files(300, 300), 1: files(400)}, 1000},
		// L1 1,500 over 1,000: 500 moves down, rewriting 500*3000/1500
		// of L2; L2 then holds 3,500, under 10,000.
		{"L1 over", map[int][]*fileMetadata{1: files(1500), 2: files(3000)}, 500 + 1000},
		// L0 600 + L1 900 rewritten; L1 becomes 1,500: 500 moves down
		// (with 500*12000/1500 of L2); L2 becomes 12,500 of 10,000:
		// 2,500 moves down, with 2,500*0/12,500 of L3.
		{"cascade", map[int][]*fileMetadata{0: files(200, 200, 200), 1: files(900), 2: files(12000)}, 1500 + 500 + 4000 + 2500},
	} {
		v := &version{}
		for level, fs := range c.levels {
			v.levels[level] = fs
		}
		if got := db.compactionDebt(v); got != c.want {
			t.Errorf("%s: debt %d, want %d", c.name, got, c.want)
		}
	}
}

// TestMetricsCompactionDebtOnADB: a real L0 past its threshold, with
// compactions off, is debt; a full compaction pays it.
func TestMetricsCompactionDebtOnADB(t *testing.T) {
	opts := smallOptions()
	opts.FS = vfs.NewMem()
	opts.DisableBackgroundCompactions = true
	db := openTestDB(t, "/db", opts)
	defer db.Close()
	for round := range 3 {
		for i := range 50 {
			if err := db.Set(fmt.Appendf(nil, "k%d-%03d", round, i), []byte("value"), &WriteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	m := db.Metrics()
	if m.Levels[0].Files != 3 {
		t.Fatalf("%d L0 tables after 3 flushes", m.Levels[0].Files)
	}
	if want := m.Levels[0].Bytes + m.Levels[1].Bytes; m.Compaction.Debt != want || want == 0 {
		t.Errorf("debt %d with L0 past its threshold, want L0+L1 = %d", m.Compaction.Debt, want)
	}
	if m.Compaction.Running != 0 {
		t.Errorf("%d compactions running with compactions off", m.Compaction.Running)
	}
	if err := db.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	if m := db.Metrics(); m.Compaction.Debt != 0 {
		t.Errorf("debt %d after a full compaction:\n%s", m.Compaction.Debt, &m)
	}
}

// TestMetricsBlockCache reads a DB larger than its block cache twice: the
// cache stays within its capacity, and the memory its blocks come from
// holds at least what is cached and stays near the capacity, however many
// blocks came and went.
func TestMetricsBlockCache(t *testing.T) {
	opts := smallOptions()
	opts.CacheSize = 1 << 20
	db := openTestDB(t, t.TempDir(), opts)
	defer db.Close()
	value := make([]byte, 200)
	const n = 20000 // about 4.4 MB of keys and values
	for i := range n {
		if err := db.Set(fmt.Appendf(nil, "k%06d", i), value, &WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		for i := range n {
			if v, err := db.Get(fmt.Appendf(nil, "k%06d", i)); err != nil || len(v) != len(value) {
				t.Fatalf("Get k%06d: %d bytes, %v", i, len(v), err)
			}
		}
	}
	m := db.Metrics().BlockCache
	if m.Hits == 0 || m.Misses == 0 || m.Size > opts.CacheSize || m.Count == 0 {
		t.Fatalf("block cache after reading %d keys twice: %+v", n, m)
	}
	// Size charges each block its slot and 96 bytes of bookkeeping.
	if m.Mapped < m.Size-m.Count*96 || m.Mapped > opts.CacheSize+8<<20 {
		t.Fatalf("block cache memory: %d bytes mapped for %d cached (capacity %d)", m.Mapped, m.Size, opts.CacheSize)
	}
}
