package lsm

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tabuladb/tabula/vfs"
)

// smallOptions make a DB that flushes and compacts after a few KiB, so tests
// exercise every level quickly.
func smallOptions() *Options {
	return &Options{
		MemTableSize:          32 << 10,
		L0CompactionThreshold: 2,
		L0StopWritesThreshold: 8,
		LBaseMaxBytes:         64 << 10,
		LevelMultiplier:       4,
		TargetFileSize:        16 << 10,
		BlockSize:             512,
		CacheSize:             64 << 10,
		MaxOpenFiles:          32,
	}
}

func openTestDB(t testing.TB, dir string, opts *Options) *DB {
	t.Helper()
	db, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return db
}

func mustGet(t testing.TB, db *DB, key string) string {
	t.Helper()
	v, err := db.Get([]byte(key))
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return string(v)
}

func TestSetGetDelete(t *testing.T) {
	db := openTestDB(t, t.TempDir(), nil)
	defer db.Close()
	if _, err := db.Get([]byte("a")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a missing key: %v, want ErrNotFound", err)
	}
	if err := db.Set([]byte("a"), []byte("1"), nil); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, db, "a"); got != "1" {
		t.Fatalf("Get = %q", got)
	}
	v, _ := db.Get([]byte("a"))
	v[0] = 'x' // the result is the caller's copy
	if got := mustGet(t, db, "a"); got != "1" {
		t.Fatalf("Get after modifying a returned value = %q", got)
	}
	if err := db.Delete([]byte("a"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Get([]byte("a")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
	if err := db.Set(nil, nil, &WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, db, ""); got != "" {
		t.Fatalf("empty key: %q", got)
	}
}

func TestBatchIsAtomicAndReusable(t *testing.T) {
	db := openTestDB(t, t.TempDir(), nil)
	defer db.Close()
	b := db.NewBatch()
	b.Set([]byte("x"), []byte("1"))
	b.Set([]byte("y"), []byte("2"))
	b.Delete([]byte("x"))
	b.Set([]byte("x"), []byte("3"))
	if b.Len() != 4 {
		t.Fatalf("Len = %d", b.Len())
	}
	if err := db.Apply(b, nil); err != nil {
		t.Fatal(err)
	}
	// Later operations in a batch win over earlier ones on the same key.
	if got := mustGet(t, db, "x"); got != "3" {
		t.Fatalf("x = %q", got)
	}
	b.Reset()
	if b.Len() != 0 {
		t.Fatal("Reset left operations")
	}
	b.Delete([]byte("y"))
	if err := db.Apply(b, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Get([]byte("y")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("y after reused batch: %v", err)
	}
	if err := db.Apply(db.NewBatch(), nil); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
}

func TestLargeBatchGetsOwnMemTable(t *testing.T) {
	db := openTestDB(t, t.TempDir(), smallOptions())
	defer db.Close()
	b := db.NewBatch()
	val := bytes.Repeat([]byte("v"), 1000)
	for i := range 500 { // ~500 KiB, far over the 32 KiB memtable
		b.Set(fmt.Appendf(nil, "big%04d", i), val)
	}
	if err := db.Apply(b, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 500 {
		if got := mustGet(t, db, fmt.Sprintf("big%04d", i)); got != string(val) {
			t.Fatalf("key %d wrong", i)
		}
	}
}

func TestIterateAcrossMemTableAndLevels(t *testing.T) {
	dir := t.TempDir()
	opts := smallOptions()
	opts.DisableBackgroundCompactions = true
	db := openTestDB(t, dir, opts)
	defer db.Close()
	want := map[string]string{}
	put := func(k, v string) {
		if err := db.Set([]byte(k), []byte(v), &WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	del := func(k string) {
		if err := db.Delete([]byte(k), &WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		delete(want, k)
	}
	// Bottom: compacted into deep levels.
	for i := range 300 {
		put(fmt.Sprintf("k%03d", i), "deep")
	}
	if err := db.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	// Middle: L0 tables overriding some and deleting others.
	for i := 0; i < 300; i += 3 {
		put(fmt.Sprintf("k%03d", i), "l0")
	}
	for i := 1; i < 300; i += 7 {
		del(fmt.Sprintf("k%03d", i))
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	// Top: memtable.
	for i := 0; i < 300; i += 5 {
		put(fmt.Sprintf("k%03d", i), "mem")
	}
	del("k002")
	m := db.Metrics()
	deep := 0
	for l := 1; l < NumLevels; l++ {
		deep += m.Levels[l].Files
	}
	if m.Levels[0].Files == 0 || deep == 0 {
		t.Fatalf("test setup: want tables in L0 and deeper levels:\n%s", &m)
	}
	checkIter(t, db.NewIter(nil), want, nil, nil)
	checkIter(t, db.NewIter(&IterOptions{LowerBound: []byte("k050"), UpperBound: []byte("k123")}), want, []byte("k050"), []byte("k123"))
	checkIter(t, db.NewIter(&IterOptions{LowerBound: []byte("k299x")}), want, []byte("k299x"), nil)
}

// checkIter compares a full forward and backward walk, and seeks, with want.
func checkIter(t *testing.T, it *Iterator, want map[string]string, lower, upper []byte) {
	t.Helper()
	defer it.Close()
	keys := sortedKeys(want, lower, upper)
	var got []string
	for ok := it.First(); ok; ok = it.Next() {
		got = append(got, string(it.Key()))
		if string(it.Value()) != want[string(it.Key())] {
			t.Fatalf("forward: %q = %q, want %q", it.Key(), it.Value(), want[string(it.Key())])
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(keys) {
		t.Fatalf("forward walk:\n got %v\nwant %v", got, keys)
	}
	got = got[:0]
	for ok := it.Last(); ok; ok = it.Prev() {
		got = append(got, string(it.Key()))
	}
	for i, j := 0, len(got)-1; i < j; i, j = i+1, j-1 {
		got[i], got[j] = got[j], got[i]
	}
	if fmt.Sprint(got) != fmt.Sprint(keys) {
		t.Fatalf("backward walk:\n got %v\nwant %v", got, keys)
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
}

func TestSnapshotIsolation(t *testing.T) {
	db := openTestDB(t, t.TempDir(), smallOptions())
	defer db.Close()
	for i := range 200 {
		db.Set(fmt.Appendf(nil, "k%03d", i), []byte("old"), &WriteOptions{})
	}
	snap := db.NewSnapshot()
	for i := range 200 {
		if i%2 == 0 {
			db.Set(fmt.Appendf(nil, "k%03d", i), []byte("new"), &WriteOptions{})
		} else {
			db.Delete(fmt.Appendf(nil, "k%03d", i), &WriteOptions{})
		}
	}
	db.Set([]byte("z-added"), []byte("new"), &WriteOptions{})
	// Push everything through flushes and compactions: the snapshot's
	// versions must survive them.
	if err := db.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	old := map[string]string{}
	for i := range 200 {
		old[fmt.Sprintf("k%03d", i)] = "old"
	}
	for k, v := range old {
		got, err := snap.Get([]byte(k))
		if err != nil || string(got) != v {
			t.Fatalf("snapshot Get(%s) = %q, %v", k, got, err)
		}
	}
	checkIter(t, snap.NewIter(nil), old, nil, nil)
	if _, err := snap.Get([]byte("z-added")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("snapshot sees a later write: %v", err)
	}
	if err := snap.Close(); err != nil {
		t.Fatal(err)
	}
	if err := snap.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	// With the snapshot gone, a full compaction drops the old versions and
	// tombstones.
	if err := db.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, db, "k000"); got != "new" {
		t.Fatalf("k000 = %q", got)
	}
}

func TestTombstonesDroppedAtBottom(t *testing.T) {
	opts := smallOptions()
	opts.DisableBackgroundCompactions = true
	db := openTestDB(t, t.TempDir(), opts)
	defer db.Close()
	val := bytes.Repeat([]byte("v"), 100)
	for i := range 2000 {
		db.Set(fmt.Appendf(nil, "k%05d", i), val, &WriteOptions{})
	}
	if err := db.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	full := db.Metrics().TotalBytes()
	for i := range 2000 {
		db.Delete(fmt.Appendf(nil, "k%05d", i), &WriteOptions{})
	}
	if err := db.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	m := db.Metrics()
	if m.TotalBytes() != 0 {
		t.Fatalf("after deleting everything and compacting, %d bytes remain (was %d):\n%s", m.TotalBytes(), full, &m)
	}
	it := db.NewIter(nil)
	if it.First() {
		t.Fatalf("deleted key %q still visible", it.Key())
	}
	it.Close()
}

func TestReopenKeepsData(t *testing.T) {
	dir := t.TempDir()
	db := openTestDB(t, dir, smallOptions())
	want := map[string]string{}
	for i := range 3000 {
		k, v := fmt.Sprintf("key%05d", i%1000), fmt.Sprintf("val%d", i)
		if err := db.Set([]byte(k), []byte(v), &WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	for i := 0; i < 1000; i += 10 {
		k := fmt.Sprintf("key%05d", i)
		db.Delete([]byte(k), &WriteOptions{})
		delete(want, k)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Get([]byte("key00001")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	for round := range 3 {
		db = openTestDB(t, dir, smallOptions())
		checkIter(t, db.NewIter(nil), want, nil, nil)
		k := fmt.Sprintf("round%d", round)
		db.Set([]byte(k), []byte("x"), nil)
		want[k] = "x"
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSecondOpenFails(t *testing.T) {
	dir := t.TempDir()
	db := openTestDB(t, dir, nil)
	if _, err := Open(dir, nil); err == nil {
		t.Fatal("second Open of a locked directory succeeded")
	}
	db.Close()
	db2 := openTestDB(t, dir, nil)
	db2.Close()
}

func TestConcurrentWritersAndReaders(t *testing.T) {
	db := openTestDB(t, t.TempDir(), smallOptions())
	defer db.Close()
	const writers, perWriter = 4, 300
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				b := db.NewBatch()
				// Both keys of a batch carry the same value: readers check
				// they never see one without the other.
				v := fmt.Appendf(nil, "%d-%d", w, i)
				b.Set(fmt.Appendf(nil, "w%d-a", w), v)
				b.Set(fmt.Appendf(nil, "w%d-b", w), v)
				if err := db.Apply(b, &WriteOptions{Sync: i%10 == 0}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	stop := make(chan struct{})
	var rg sync.WaitGroup
	for range 2 {
		rg.Add(1)
		go func() {
			defer rg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				snap := db.NewSnapshot()
				for w := range writers {
					a, errA := snap.Get(fmt.Appendf(nil, "w%d-a", w))
					b, errB := snap.Get(fmt.Appendf(nil, "w%d-b", w))
					if (errA == nil) != (errB == nil) || !bytes.Equal(a, b) {
						t.Errorf("torn batch: a=%q,%v b=%q,%v", a, errA, b, errB)
					}
				}
				snap.Close()
			}
		}()
	}
	wg.Wait()
	close(stop)
	rg.Wait()
	for w := range writers {
		if got := mustGet(t, db, fmt.Sprintf("w%d-a", w)); got != fmt.Sprintf("%d-%d", w, perWriter-1) {
			t.Fatalf("writer %d final value %q", w, got)
		}
	}
}

func TestDropKeyRemovesKeysInCompaction(t *testing.T) {
	var dropped sync.Map // prefixes whose keys compactions drop
	opts := smallOptions()
	opts.DropKey = func(key []byte) bool {
		_, ok := dropped.Load(string(key[:2]))
		return ok
	}
	db := openTestDB(t, t.TempDir(), opts)
	defer db.Close()
	for i := range 500 {
		db.Set(fmt.Appendf(nil, "a/%04d", i), []byte("keep"), &WriteOptions{})
		db.Set(fmt.Appendf(nil, "b/%04d", i), []byte("drop"), &WriteOptions{})
	}
	if err := db.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	dropped.Store("b/", true)
	if err := db.Compact([]byte("b/"), []byte("b0")); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i := range 500 {
		want[fmt.Sprintf("a/%04d", i)] = "keep"
	}
	checkIter(t, db.NewIter(nil), want, nil, nil)
}

// TestCompactReachesTablesMovedDuringIt: an automatic compaction between
// two steps of Compact may move a table of the range below the deepest
// level Compact first saw (a trivial move, which rewrites nothing); Compact
// must still rewrite it, or the keys DropKey drops survive it (a dropped
// table's entities did, in the partition layer's power-loss test).
func TestCompactReachesTablesMovedDuringIt(t *testing.T) {
	var dropping atomic.Bool
	opts := smallOptions()
	opts.DisableBackgroundCompactions = true
	opts.DropKey = func(key []byte) bool { return dropping.Load() && key[0] == 'b' }
	db := openTestDB(t, t.TempDir(), opts)
	defer db.Close()
	for i := range 2000 {
		if err := db.Set(fmt.Appendf(nil, "b/%04d", i), bytes.Repeat([]byte("v"), 40), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	db.mu.Lock()
	l1 := len(db.versions.current.levels[1])
	db.mu.Unlock()
	if l1 < 2 {
		t.Fatalf("want the keys in several L1 tables, have %d", l1)
	}

	moved := false
	db.beforeCompactStep = func(level int) {
		if level != 1 || moved {
			return
		}
		moved = true
		// What the compaction goroutine would do if it picked L1's last
		// table: move it to L2 by a manifest edit.
		db.mu.Lock()
		v := db.versions.current
		c := db.newCompaction(v, 1, v.levels[1][len(v.levels[1])-1:])
		c.trivialMove = true
		db.compacting = true
		c.setCompacting(true)
		db.mu.Unlock()
		if err := db.runCompaction(c); err != nil {
			t.Error(err)
		}
	}
	dropping.Store(true)
	if err := db.Compact([]byte("b"), []byte("c")); err != nil {
		t.Fatal(err)
	}
	if !moved {
		t.Fatal("Compact never reached its L1 step")
	}
	checkIter(t, db.NewIter(nil), map[string]string{}, nil, nil)
}

func TestRunsOnMemFS(t *testing.T) {
	fs := vfs.NewMem()
	opts := smallOptions()
	opts.FS = fs
	db := openTestDB(t, "/db", opts)
	want := map[string]string{}
	for i := range 2000 {
		k := fmt.Sprintf("k%04d", i%700)
		want[k] = fmt.Sprint(i)
		db.Set([]byte(k), []byte(want[k]), nil)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTestDB(t, "/db", opts)
	defer db.Close()
	checkIter(t, db.NewIter(nil), want, nil, nil)
	if d, err := Describe("/db", fs); err != nil || d.LastSeq < 2000 {
		t.Fatalf("Describe = %+v, %v", d, err)
	}
}

// TestGetFunc reads values in place, from a memtable and from a table,
// as Get reads them; a deleted or missing key is ErrNotFound. Get,
// GetApplied and a snapshot's Get still return copies: changing one
// changes nothing the next read sees.
func TestGetFunc(t *testing.T) {
	db := openTestDB(t, t.TempDir(), smallOptions())
	for i := range 50 {
		if err := db.Set(fmt.Appendf(nil, "k%02d", i), fmt.Appendf(nil, "value %d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Delete([]byte("k07"), nil); err != nil {
		t.Fatal(err)
	}
	check := func(where string) {
		t.Helper()
		for _, i := range []int{0, 25, 49} {
			var got string
			if err := db.GetFunc(fmt.Appendf(nil, "k%02d", i), func(v []byte) { got = string(v) }); err != nil || got != fmt.Sprintf("value %d", i) {
				t.Fatalf("%s: GetFunc(k%02d) = %q, %v", where, i, got, err)
			}
		}
		for _, k := range []string{"k07", "k99"} {
			if err := db.GetFunc([]byte(k), func([]byte) { t.Fatalf("%s: GetFunc(%s) called fn", where, k) }); err != ErrNotFound {
				t.Fatalf("%s: GetFunc(%s) = %v, want ErrNotFound", where, k, err)
			}
		}
		snap := db.NewSnapshot()
		defer snap.Close()
		for name, get := range map[string]func([]byte) ([]byte, error){"Get": db.Get, "GetApplied": db.GetApplied, "Snapshot.Get": snap.Get} {
			v, err := get([]byte("k25"))
			if err != nil {
				t.Fatal(err)
			}
			copy(v, "XXXXX")
			if again, _ := get([]byte("k25")); string(again) != "value 25" {
				t.Fatalf("%s: %s returned the engine's memory, not a copy: now %q", where, name, again)
			}
		}
	}
	check("in the memtable")
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	check("in a table")
	db.Close()
	if err := db.GetFunc([]byte("k00"), func([]byte) {}); err != ErrClosed {
		t.Fatalf("GetFunc on a closed DB: %v", err)
	}
}

// TestSingleWritesReuseTheirBatch checks that Set and Delete recycle their
// batch: a stream of single writes allocates nothing per write (each used
// to allocate its encoding and grow it, garbage that held megabytes of
// heap under slow synced writes), and a recycled batch carries nothing of
// the write before it, a huge one included (which is not kept).
func TestSingleWritesReuseTheirBatch(t *testing.T) {
	db := openTestDB(t, "db", &Options{FS: vfs.NewMem()})
	defer db.Close()
	noSync := &WriteOptions{Sync: false}
	key, value := make([]byte, 40), make([]byte, 256)
	i := 0
	allocs := testing.AllocsPerRun(2000, func() {
		i++
		key[0], key[1] = byte(i), byte(i>>8)
		if i%4 == 0 {
			if err := db.Delete(key, noSync); err != nil {
				t.Fatal(err)
			}
			return
		}
		if err := db.Set(key, value, noSync); err != nil {
			t.Fatal(err)
		}
	})
	// Memtable rotations allocate, rarely; a batch per write would be 1 or more.
	if allocs >= 0.5 && !raceEnabled {
		t.Fatalf("Set and Delete allocate %.2f times per write; want their batch recycled", allocs)
	}

	huge := bytes.Repeat([]byte("h"), 2*maxPooledBatch)
	writes := []struct{ key, value string }{{"a", "1"}, {"b", string(huge)}, {"c", "3"}, {"d", ""}, {"b", "2"}}
	for _, w := range writes {
		if err := db.Set([]byte(w.key), []byte(w.value), noSync); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Delete([]byte("d"), noSync); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"a": "1", "b": "2", "c": "3"} {
		if got := mustGet(t, db, key); got != want {
			t.Fatalf("Get(%q) = %q, want %q", key, got, want)
		}
	}
	if _, err := db.Get([]byte("d")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(d) after its Delete: %v, want ErrNotFound", err)
	}
}
