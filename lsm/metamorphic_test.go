package lsm

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/vfs"
)

var (
	metamorphicDuration = flag.Duration("metamorphic-duration", 4*time.Second, "time budget of TestMetamorphic (at least one trace runs)")
	metamorphicOps      = flag.Int("metamorphic-ops", 500, "operations per trace of TestMetamorphic")
	metamorphicSeed     = flag.Uint64("metamorphic-seed", 0, "run only this trace seed of TestMetamorphic (its failures name it)")
	metamorphicVariant  = flag.String("metamorphic-options", "", "run only the option sets of TestMetamorphic whose name contains this")
)

// metaVariant is an option set a trace runs under.
type metaVariant struct {
	name string
	edit func(*Options)
	// osFS runs on the operating system's filesystem instead of MemFS.
	osFS bool
	// newManifests starts a new manifest at every edit.
	newManifests bool
}

var metaVariants = []metaVariant{
	{name: "small"},
	{name: "tiny memtable", edit: func(o *Options) { o.MemTableSize = 4 << 10 }},
	{name: "no bloom filter", edit: func(o *Options) { o.BloomBitsPerKey = -1 }},
	// Few tables: each zstd table writer allocates an encoder, slow under
	// the race detector.
	{name: "zstd", edit: func(o *Options) {
		o.Compression, o.MemTableSize, o.TargetFileSize = ZstdCompression, 1<<20, 1<<20
		o.L0CompactionThreshold, o.L0StopWritesThreshold = 8, 16
	}},
	{name: "no compression", edit: func(o *Options) { o.Compression = NoCompression }},
	{name: "tiny blocks", edit: func(o *Options) { o.BlockSize = 64 }},
	{name: "tiny levels and L0 triggers", edit: func(o *Options) {
		o.LBaseMaxBytes, o.TargetFileSize, o.LevelMultiplier = 8<<10, 2<<10, 2
		o.L0CompactionThreshold, o.L0StopWritesThreshold = 1, 2
	}},
	{name: "tiny cache, fewest open tables", edit: func(o *Options) { o.CacheSize, o.MaxOpenFiles = 1<<10, 1 }},
	{name: "no block cache", edit: func(o *Options) { o.CacheSize = -1 }},
	{name: "no background compactions", edit: func(o *Options) { o.DisableBackgroundCompactions = true }},
	{name: "prefix filters", edit: func(o *Options) {
		// "key0001" of "key000123": 100 keys a prefix.
		o.Split = func(k []byte) int { return min(len(k), 7) }
	}},
	{name: "new manifest every edit", newManifests: true},
	{name: "OS filesystem", osFS: true},
}

// metaOp is one operation of a trace. Which fields matter depends on kind.
type metaOp struct {
	kind         string // set, delete, batch, get, iter, snapshot, release, flush, compact, reopen
	key, value   string
	sync         bool
	batch        []mutation
	snap         int    // get, iter: -1 for the DB, else a live snapshot's index; release: the index
	lower, upper []byte // iter, compact
	steps        []string
}

func (op metaOp) String() string {
	switch op.kind {
	case "set":
		return fmt.Sprintf("set %s (sync %v)", op.key, op.sync)
	case "batch":
		return fmt.Sprintf("batch of %d", len(op.batch))
	case "get", "release":
		return fmt.Sprintf("%s %s snapshot %d", op.kind, op.key, op.snap)
	case "iter", "compact":
		return fmt.Sprintf("%s [%s, %s) snapshot %d: %s", op.kind, op.lower, op.upper, op.snap, strings.Join(op.steps, " "))
	}
	return op.kind + " " + op.key
}

// genTrace generates a trace: sets, deletes, batches, snapshot reads,
// bounded iteration both ways, flushes, range compactions and reopens.
func genTrace(rng *rand.Rand, n int) []metaOp {
	key := func() string {
		if rng.IntN(4) == 0 {
			return fmt.Sprintf("key%06d", rng.IntN(100000))
		}
		return fmt.Sprintf("key%06d", rng.IntN(400))
	}
	value := func() string {
		return fmt.Sprintf("v%d-%s", rng.Uint32(), strings.Repeat("x", rng.IntN(200)))
	}
	bound := func() []byte {
		if rng.IntN(3) == 0 {
			return nil
		}
		return []byte(key())
	}
	bounds := func() ([]byte, []byte) {
		lo, hi := bound(), bound()
		if lo != nil && hi != nil && string(lo) > string(hi) {
			lo, hi = hi, lo
		}
		if rng.IntN(4) == 0 && lo != nil { // often within one prefix
			hi = fmt.Appendf(nil, "%s%02d", lo[:7], 50+rng.IntN(50))
			if string(hi) <= string(lo) {
				hi = nil
			}
		}
		return lo, hi
	}
	snaps := 0
	var trace []metaOp
	for len(trace) < n {
		var op metaOp
		switch r := rng.IntN(100); {
		case r < 30:
			op = metaOp{kind: "set", key: key(), value: value(), sync: rng.IntN(50) == 0}
		case r < 38:
			op = metaOp{kind: "delete", key: key()}
		case r < 48:
			op.kind = "batch"
			for range 1 + rng.IntN(20) {
				if rng.IntN(4) == 0 {
					op.batch = append(op.batch, mutation{key: key(), del: true})
				} else {
					op.batch = append(op.batch, mutation{key: key(), value: value()})
				}
			}
		case r < 63:
			op = metaOp{kind: "get", key: key(), snap: rng.IntN(snaps+1) - 1}
		case r < 75:
			op = metaOp{kind: "iter", snap: rng.IntN(snaps+1) - 1}
			op.lower, op.upper = bounds()
			for range 30 {
				switch r := rng.IntN(10); {
				case r == 0:
					op.steps = append(op.steps, "first")
				case r == 1:
					op.steps = append(op.steps, "last")
				case r == 2:
					op.steps = append(op.steps, "seekge:"+key())
				case r == 3:
					op.steps = append(op.steps, "seeklt:"+key())
				case r < 7:
					op.steps = append(op.steps, "next")
				default:
					op.steps = append(op.steps, "prev")
				}
			}
		case r < 80:
			if snaps < 4 {
				op.kind = "snapshot"
				snaps++
			}
		case r < 84:
			if snaps > 0 {
				op = metaOp{kind: "release", snap: rng.IntN(snaps)}
				snaps--
			}
		case r < 90:
			op.kind = "flush"
		case r < 95:
			op.kind = "compact"
			op.lower, op.upper = bounds()
		case r < 97:
			op.kind = "reopen"
			snaps = 0
		}
		if op.kind != "" {
			trace = append(trace, op)
		}
	}
	return trace
}

// runTraceModel runs a trace against the model and returns one line of output
// per op; the engine's runs must produce the same lines.
func runTraceModel(trace []metaOp) []string {
	state := model{}
	var snaps []model
	out := make([]string, 0, len(trace)+1)
	for _, op := range trace {
		line := ""
		switch op.kind {
		case "set":
			state[op.key] = op.value
		case "delete":
			delete(state, op.key)
		case "batch":
			applyMutations(state, op.batch)
		case "get", "iter":
			r := state
			if op.snap >= 0 {
				r = snaps[op.snap]
			}
			if op.kind == "get" {
				line = modelReader(r).get(op.key)
			} else {
				line = modelReader(r).iter(op.lower, op.upper, op.steps)
			}
		case "snapshot":
			snaps = append(snaps, state.clone())
		case "release":
			snaps = slices.Delete(snaps, op.snap, op.snap+1)
		case "reopen":
			snaps = nil
		}
		out = append(out, line)
	}
	return append(out, modelReader(state).iter(nil, nil, []string{"all"}))
}

// modelReader reads a model state as the DB reads itself.
type modelReader model

func (m modelReader) get(key string) string {
	if v, ok := m[key]; ok {
		return v
	}
	return "<not found>"
}

func (m modelReader) iter(lower, upper []byte, steps []string) string {
	keys := sortedKeys(m, lower, upper)
	var b strings.Builder
	pos := -1
	for _, step := range steps {
		valid := pos >= 0 && pos < len(keys)
		switch cmd, arg, _ := strings.Cut(step, ":"); cmd {
		case "all":
			for _, k := range keys {
				fmt.Fprintf(&b, "%s=%s ", k, m[k])
			}
			return b.String()
		case "first":
			pos = 0
		case "last":
			pos = len(keys) - 1
		case "seekge":
			pos = sort.SearchStrings(keys, arg)
		case "seeklt":
			pos = sort.SearchStrings(keys, arg) - 1
		case "next", "prev":
			if !valid {
				b.WriteString("- ")
				continue
			}
			if cmd == "next" {
				pos++
			} else {
				pos--
			}
		}
		if pos >= 0 && pos < len(keys) {
			fmt.Fprintf(&b, "%s=%s ", keys[pos], m[keys[pos]])
		} else {
			b.WriteString("invalid ")
		}
	}
	return b.String()
}

// dbReader reads through a DB or a snapshot.
type dbReader struct {
	t       *testing.T
	getFn   func([]byte) ([]byte, error)
	newIter func(*IterOptions) *Iterator
}

func (r dbReader) get(key string) string {
	v, err := r.getFn([]byte(key))
	if err == ErrNotFound {
		return "<not found>"
	} else if err != nil {
		r.t.Fatalf("get %s: %v", key, err)
	}
	return string(v)
}

func (r dbReader) iter(lower, upper []byte, steps []string) string {
	it := r.newIter(&IterOptions{LowerBound: lower, UpperBound: upper})
	defer it.Close()
	var b strings.Builder
	for _, step := range steps {
		var ok bool
		switch cmd, arg, _ := strings.Cut(step, ":"); cmd {
		case "all":
			for ok := it.First(); ok; ok = it.Next() {
				fmt.Fprintf(&b, "%s=%s ", it.Key(), it.Value())
			}
		case "first":
			ok = it.First()
		case "last":
			ok = it.Last()
		case "seekge":
			ok = it.SeekGE([]byte(arg))
		case "seeklt":
			ok = it.SeekLT([]byte(arg))
		case "next", "prev":
			if !it.Valid() {
				b.WriteString("- ")
				continue
			}
			if cmd == "next" {
				ok = it.Next()
			} else {
				ok = it.Prev()
			}
		}
		if step == "all" {
			break
		}
		if ok {
			fmt.Fprintf(&b, "%s=%s ", it.Key(), it.Value())
		} else {
			b.WriteString("invalid ")
		}
	}
	if err := it.Error(); err != nil {
		r.t.Fatalf("iterator: %v", err)
	}
	return b.String()
}

// runTraceDB runs a trace on a DB opened with v's options and returns its
// output lines.
func runTraceDB(t *testing.T, trace []metaOp, v metaVariant) []string {
	opts := smallOptions()
	dir := "/db"
	if v.osFS {
		dir = t.TempDir()
	} else {
		opts.FS = vfs.NewMem()
	}
	if v.edit != nil {
		v.edit(opts)
	}
	open := func() *DB {
		db, err := Open(dir, opts)
		if err != nil {
			t.Fatalf("%s: open: %v", v.name, err)
		}
		if v.newManifests {
			setMaxManifestSize(db, 0)
		}
		return db
	}
	db := open()
	defer func() { db.Close() }()
	var snaps []*Snapshot
	out := make([]string, 0, len(trace)+1)
	for i, op := range trace {
		var err error
		line := ""
		switch op.kind {
		case "set":
			err = db.Set([]byte(op.key), []byte(op.value), &WriteOptions{Sync: op.sync})
		case "delete":
			err = db.Delete([]byte(op.key), &WriteOptions{})
		case "batch":
			b := db.NewBatch()
			for _, m := range op.batch {
				if m.del {
					b.Delete([]byte(m.key))
				} else {
					b.Set([]byte(m.key), []byte(m.value))
				}
			}
			err = db.Apply(b, &WriteOptions{})
		case "get", "iter":
			r := dbReader{t: t, getFn: db.Get, newIter: db.NewIter}
			if op.snap >= 0 {
				s := snaps[op.snap]
				r = dbReader{t: t, getFn: s.Get, newIter: s.NewIter}
			}
			if op.kind == "get" {
				line = r.get(op.key)
			} else {
				line = r.iter(op.lower, op.upper, op.steps)
			}
		case "snapshot":
			snaps = append(snaps, db.NewSnapshot())
		case "release":
			snaps[op.snap].Close()
			snaps = slices.Delete(snaps, op.snap, op.snap+1)
		case "flush":
			err = db.Flush()
		case "compact":
			err = db.Compact(op.lower, op.upper)
		case "reopen":
			for _, s := range snaps {
				s.Close()
			}
			snaps = nil
			if err = db.Close(); err == nil {
				db = open()
			}
		}
		if err != nil {
			t.Fatalf("%s: op %d (%s): %v", v.name, i, op, err)
		}
		out = append(out, line)
	}
	for _, s := range snaps {
		s.Close()
	}
	return append(out, dbReader{t: t, getFn: db.Get, newIter: db.NewIter}.iter(nil, nil, []string{"all"}))
}

// TestMetamorphic generates random operation traces and runs each under
// option sets that change how the engine lays data out and reads it back
// (memtable size, filters, compression, block size, level shape and L0
// triggers, caches, open-table bound, background compactions, prefix
// filters, manifest rotation, the OS filesystem). Every option set must
// produce exactly the output of a trivially correct in-memory model, and
// so the same output as each other, for every read of the trace and for
// the final contents.
func TestMetamorphic(t *testing.T) {
	start := time.Now()
	traces, ops := 0, 0
	for seed := uint64(1); traces == 0 || time.Since(start) < *metamorphicDuration; seed++ {
		if *metamorphicSeed != 0 {
			if traces > 0 {
				break
			}
			seed = *metamorphicSeed
		}
		trace := genTrace(rand.New(rand.NewPCG(seed, 0x6d657461)), *metamorphicOps)
		want := runTraceModel(trace)
		for _, v := range metaVariants {
			if !strings.Contains(v.name, *metamorphicVariant) {
				continue
			}
			got := runTraceDB(t, trace, v)
			for i := range want {
				if got[i] != want[i] {
					what := "final contents"
					if i < len(trace) {
						what = fmt.Sprintf("op %d (%s)", i, trace[i])
					}
					t.Fatalf("seed %d, options %q: %s:\n got %.300s\nwant %.300s", seed, v.name, what, got[i], want[i])
				}
			}
			ops += len(trace)
		}
		traces++
	}
	t.Logf("%d traces of %d ops under %d option sets: %d ops, every result equal to the model's", traces, *metamorphicOps, len(metaVariants), ops)
}
