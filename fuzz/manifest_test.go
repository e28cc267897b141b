package fuzz

import (
	"fmt"
	"io"
	"testing"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/vfs"
)

// manifestSeeds returns real manifests: of an empty DB, and of a DB with
// tables in several levels after flushes, compactions and a reopen.
func manifestSeeds(tb testing.TB) [][]byte {
	var seeds [][]byte
	for _, keys := range []int{0, 300, 3000} {
		fs := vfs.NewMem()
		opts := &lsm.Options{FS: fs, MemTableSize: 16 << 10, LBaseMaxBytes: 32 << 10, TargetFileSize: 8 << 10, L0CompactionThreshold: 2}
		db, err := lsm.Open("/db", opts)
		if err != nil {
			tb.Fatal(err)
		}
		for i := range keys {
			db.Set(fmt.Appendf(nil, "key%06d", i*7919%keys), fmt.Appendf(nil, "value%d", i), &lsm.WriteOptions{})
		}
		if keys > 0 {
			db.Compact(nil, nil)
			db.Set([]byte("after"), []byte("compaction"), nil)
			db.Flush()
		}
		if err := db.Close(); err != nil {
			tb.Fatal(err)
		}
		d, err := lsm.Describe("/db", fs)
		if err != nil {
			tb.Fatal(err)
		}
		f, err := fs.Open(d.Manifest)
		if err != nil {
			tb.Fatal(err)
		}
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			tb.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	return seeds
}

// FuzzManifest feeds arbitrary bytes to the engine as a MANIFEST and reads
// it the way Open does (lsm.Describe shares the loading code): it must
// return a version or an error, never panic or hang.
func FuzzManifest(f *testing.F) {
	for _, s := range manifestSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fs := vfs.NewMem()
		fs.MkdirAll("/db", 0o700)
		writeFile(t, fs, "/db/CURRENT", []byte("MANIFEST-000001\n"))
		writeFile(t, fs, "/db/MANIFEST-000001", data)
		d, err := lsm.Describe("/db", fs)
		if err != nil {
			return
		}
		for level, tables := range d.Levels {
			for _, tbl := range tables {
				if string(tbl.Smallest) > string(tbl.Largest) {
					t.Fatalf("L%d table %d: smallest %q > largest %q accepted", level, tbl.FileNum, tbl.Smallest, tbl.Largest)
				}
			}
		}
	})
}

func writeFile(t *testing.T, fs vfs.FS, name string, data []byte) {
	f, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func TestManifestSeedsDescribe(t *testing.T) {
	for i, s := range manifestSeeds(t) {
		fs := vfs.NewMem()
		fs.MkdirAll("/db", 0o700)
		writeFile(t, fs, "/db/CURRENT", []byte("MANIFEST-000001\n"))
		writeFile(t, fs, "/db/MANIFEST-000001", s)
		if _, err := lsm.Describe("/db", fs); err != nil {
			t.Errorf("seed %d: %v", i, err)
		}
	}
}
