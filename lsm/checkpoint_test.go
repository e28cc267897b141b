package lsm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tabuladb/tabula/vfs"
)

// ckWrite is one acknowledged batch of the load: its sequence number and
// the keys it set (or deleted).
type ckWrite struct {
	seq  uint64
	keys []string
	del  bool
}

// TestCheckpointUnderLoad takes checkpoints while writers commit batches
// (small memtables, so flushes and compactions run and delete tables and
// WAL segments meanwhile) and checks that each checkpoint opens to exactly
// the batches up to its sequence number: all of every one at or below it,
// nothing of any above.
func TestCheckpointUnderLoad(t *testing.T) {
	for _, fsName := range []string{"os", "mem"} {
		t.Run(fsName, func(t *testing.T) {
			var fs vfs.FS = vfs.Default()
			root := t.TempDir()
			if fsName == "mem" {
				fs, root = vfs.NewMem(), "/ck"
			}
			opts := &Options{FS: fs, MemTableSize: 64 << 10, L0CompactionThreshold: 2, TargetFileSize: 16 << 10}
			db, err := Open(filepath.Join(root, "db"), opts)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()

			var (
				mu     sync.Mutex
				writes []ckWrite
				stop   atomic.Bool
				wg     sync.WaitGroup
			)
			for w := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; !stop.Load(); i++ {
						b := db.NewBatch()
						var keys []string
						del := i%7 == 6 && i > 0
						for j := range 3 {
							// A delete removes the keys of the writer's previous batch.
							k := fmt.Sprintf("w%d-%06d-%d", w, i, j)
							if del {
								k = fmt.Sprintf("w%d-%06d-%d", w, i-1, j)
								b.Delete([]byte(k))
							} else {
								b.Set([]byte(k), []byte(k+"-value-padding-padding-padding"))
							}
							keys = append(keys, k)
						}
						p, err := db.Enqueue(b, &WriteOptions{Sync: i%2 == 0})
						if err == nil {
							err = p.Wait()
						}
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						writes = append(writes, ckWrite{seq: p.Seq(), keys: keys, del: del})
						mu.Unlock()
					}
				}()
			}
			type ck struct {
				dir string
				seq uint64
			}
			var cks []ck
			tablesMade := func() bool {
				m := db.Metrics()
				return m.Flush.Count > 0 && m.Compaction.Count > 0
			}
			deadline := time.Now().Add(30 * time.Second)
			for i := range 4 {
				for {
					mu.Lock()
					n := len(writes)
					mu.Unlock()
					// The last checkpoint waits for a flush and a
					// compaction too: how much the writers write by then
					// depends on the machine.
					if n >= (i+1)*150 && (i < 3 || tablesMade() || time.Now().After(deadline)) {
						break
					}
				}
				dir := filepath.Join(root, fmt.Sprintf("ck%d", i))
				seq, err := db.Checkpoint(dir)
				if err != nil {
					t.Fatal(err)
				}
				cks = append(cks, ck{dir, seq})
			}
			stop.Store(true)
			wg.Wait()
			if m := db.Metrics(); m.Flush.Count == 0 || m.Compaction.Count == 0 {
				t.Fatalf("no flush or no compaction ran during the load: the test does not exercise tables")
			}

			for _, c := range cks {
				want := model{}
				// Batches applied in sequence order give the state at c.seq.
				ordered := append([]ckWrite(nil), writes...)
				sortWrites(ordered)
				var below, above int
				for _, w := range ordered {
					if w.seq > c.seq {
						above++
						continue
					}
					below++
					for _, k := range w.keys {
						if w.del {
							delete(want, k)
						} else {
							want[k] = k + "-value-padding-padding-padding"
						}
					}
				}
				if below == 0 || above == 0 {
					t.Fatalf("checkpoint at %d: %d batches below, %d above: the load did not straddle it", c.seq, below, above)
				}
				if rep, err := Verify(c.dir, fs); err != nil || len(rep.Notes) > 0 {
					t.Fatalf("verify checkpoint %s: %v (notes %q)", c.dir, err, rep.Notes)
				}
				cdb, err := Open(c.dir, &Options{FS: fs})
				if err != nil {
					t.Fatalf("open checkpoint %s: %v", c.dir, err)
				}
				got := scanAll(t, cdb)
				if err := cdb.Close(); err != nil {
					t.Fatal(err)
				}
				if diff := diffModels(got, want); diff != "" {
					t.Fatalf("checkpoint at seq %d (%d batches at or below, %d above): %s", c.seq, below, above, diff)
				}
			}
		})
	}
}

func sortWrites(ws []ckWrite) {
	for i := 1; i < len(ws); i++ {
		for j := i; j > 0 && ws[j].seq < ws[j-1].seq; j-- {
			ws[j], ws[j-1] = ws[j-1], ws[j]
		}
	}
}

// diffModels describes the first differences between got and want.
func diffModels(got, want model) string {
	var out string
	n := 0
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			out += fmt.Sprintf("\n  %q: got %q (present %v), want %q", k, g, ok, v)
			if n++; n > 5 {
				return out
			}
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			out += fmt.Sprintf("\n  %q: got %q, want absent", k, v)
			if n++; n > 5 {
				return out
			}
		}
	}
	return out
}

// TestCheckpointLinksTables checks that on the OS filesystem the tables of
// a checkpoint are hard links to the DB's, and that the checkpoint
// survives the DB deleting them.
func TestCheckpointLinksTables(t *testing.T) {
	root := t.TempDir()
	db, err := Open(filepath.Join(root, "db"), &Options{DisableBackgroundCompactions: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := range 100 {
		if err := db.Set(fmt.Appendf(nil, "k%03d", i), []byte("v"), nil); err != nil {
			t.Fatal(err)
		}
		if i%50 == 49 {
			if err := db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	ckDir := filepath.Join(root, "ck")
	if _, err := db.Checkpoint(ckDir); err != nil {
		t.Fatal(err)
	}
	names, _ := filepath.Glob(filepath.Join(ckDir, "*.sst"))
	if len(names) != 2 {
		t.Fatalf("checkpoint has %d tables, want 2: %v", len(names), names)
	}
	for _, name := range names {
		a, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.Stat(filepath.Join(root, "db", filepath.Base(name)))
		if err != nil {
			t.Fatal(err)
		}
		if !os.SameFile(a, b) {
			t.Errorf("%s is a copy, not a hard link", name)
		}
	}
	// Compacting deletes the DB's tables; the checkpoint keeps its names.
	if err := db.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	cdb, err := Open(ckDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cdb.Close()
	if got := len(scanAll(t, cdb)); got != 100 {
		t.Fatalf("checkpoint holds %d keys, want 100", got)
	}
}

// TestCheckpointCopiesSegmentsAsFarAsTheirRecords: the WAL segments of a
// checkpoint are copies, not links (a retired segment's file is written
// over by a later segment), and hold their own records only: a segment
// written over a retired one's file leaves the older records behind,
// writes the checkpoint must not keep.
func TestCheckpointCopiesSegmentsAsFarAsTheirRecords(t *testing.T) {
	root := t.TempDir()
	db, err := Open(filepath.Join(root, "db"), &Options{MemTableSize: 64 << 10, InitialMemTableSize: -1, DisableBackgroundCompactions: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	secret := bytes.Repeat([]byte("older-secret!"), 20)
	for i := range 2000 {
		if err := db.Set(fmt.Appendf(nil, "old%06d", i), secret, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Every segment with the older writes flushed and retired; small
	// writes go on until a segment is written over a retired one's file,
	// and end among its records.
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	reused := db.Metrics().WAL.Reused
	for i := 0; db.Metrics().WAL.Reused == reused; i++ {
		if i > 100000 {
			t.Fatal("no WAL segment was written over a retired one")
		}
		if err := db.Set(fmt.Appendf(nil, "new%06d", i), []byte("v"), nil); err != nil {
			t.Fatal(err)
		}
	}
	ckDir := filepath.Join(root, "ck")
	if _, err := db.Checkpoint(ckDir); err != nil {
		t.Fatal(err)
	}
	logs, _ := filepath.Glob(filepath.Join(ckDir, "*.log"))
	if len(logs) == 0 {
		t.Fatal("the checkpoint has no WAL segment")
	}
	for _, name := range logs {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := statOf(t, name), statOf(t, filepath.Join(root, "db", filepath.Base(name))); b != nil && os.SameFile(a, b) {
			t.Errorf("%s is a link to the DB's segment, not a copy", name)
		}
		if bytes.Contains(data, secret) {
			t.Errorf("%s holds an older segment's records past its own", name)
		}
	}
	cdb, err := Open(ckDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cdb.Close()
	for i := range 50 {
		if _, err := cdb.Get(fmt.Appendf(nil, "new%06d", i)); err != nil {
			t.Fatalf("new%06d in the checkpoint: %v", i, err)
		}
	}
}

// statOf stats name, nil when it does not exist.
func statOf(t *testing.T, name string) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

func TestCheckpointRefusesNonEmptyDir(t *testing.T) {
	root := t.TempDir()
	db, err := Open(filepath.Join(root, "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	dir := filepath.Join(root, "ck")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Checkpoint(dir); err == nil {
		t.Fatal("checkpoint into a non-empty directory succeeded")
	}
}

// TestCheckpointSyncFailure: a batch whose WAL fsync fails is never
// acknowledged, so a checkpoint taken while that fsync runs must not
// produce a copy holding it: Checkpoint fails instead.
func TestCheckpointSyncFailure(t *testing.T) {
	gate := vfs.NewSyncGate(vfs.NewMem(), ".log", 0)
	db, err := Open("/db", &Options{FS: gate})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Set([]byte("before"), []byte("1"), nil); err != nil {
		t.Fatal(err)
	}
	gate.Hold()
	applied := make(chan error, 1)
	go func() { applied <- db.Set([]byte("lost"), []byte("1"), nil) }()
	<-gate.Entered()
	type result struct {
		seq uint64
		err error
	}
	ck := make(chan result, 1)
	go func() {
		seq, err := db.Checkpoint("/ck")
		ck <- result{seq, err}
	}()
	gate.Release(fmt.Errorf("injected fsync failure"))
	if err := <-applied; err == nil {
		t.Fatal("the write whose fsync failed was acknowledged")
	}
	r := <-ck
	if r.err == nil {
		cdb, err := Open("/ck", &Options{FS: gate.FS})
		if err != nil {
			t.Fatalf("checkpoint at %d succeeded but does not open: %v", r.seq, err)
		}
		defer cdb.Close()
		if _, err := cdb.Get([]byte("lost")); err == nil {
			t.Fatalf("checkpoint at %d holds a write whose fsync failed", r.seq)
		}
	}
}
