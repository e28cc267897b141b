package fuzz

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/vfs"
	"github.com/tabuladb/tabula/wal"
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

// FuzzVersionEdit feeds arbitrary bytes to the decoder of one MANIFEST
// record, past the record framing and checksum that stop nearly every
// mutation FuzzManifest makes. A record it refuses must be refused as
// corruption. One it accepts must round-trip: its re-encoding decodes to
// the same edit, and encoding that again gives the same bytes.
func FuzzVersionEdit(f *testing.F) {
	for _, m := range manifestSeeds(f) {
		for _, rec := range manifestRecords(f, m) {
			f.Add(rec)
		}
	}
	// Every field, spelled out by hand so that the seeds do not depend on
	// the encoder under test: format 1, log 4, next file 7, last seq 300,
	// delete L0 table 5, add L1 table 6 of 64 bytes with keys "a"#1,SET
	// and "b"#300,SET and seqnums 1..300.
	f.Add([]byte("\x01\x01\x02\x04\x03\x07\x04\xac\x02\x05\x00\x05\x06\x01\x06\x40" +
		"\x09a\x01\x01\x00\x00\x00\x00\x00\x00\x09b\x01\x2c\x01\x00\x00\x00\x00\x00\x01\xac\x02"))
	f.Add([]byte{})
	f.Add([]byte{2, 0x80, 0x00}) // a zero log number, over-long
	f.Fuzz(func(t *testing.T, data []byte) {
		enc, fields, err := lsm.ReencodeVersionEdit(data)
		if err != nil {
			if !errors.Is(err, lsm.ErrCorruption) {
				t.Fatalf("refusal %v is not corruption", err)
			}
			return
		}
		enc2, fields2, err := lsm.ReencodeVersionEdit(enc)
		if err != nil {
			t.Fatalf("edit {%s} re-encoded as %x, which is refused: %v", fields, enc, err)
		}
		if fields2 != fields {
			t.Fatalf("edit {%s} re-encoded as %x, which decodes to {%s}", fields, enc, fields2)
		}
		if !bytes.Equal(enc2, enc) {
			t.Fatalf("edit {%s} encodes as %x, then as %x", fields, enc, enc2)
		}
	})
}

// manifestRecords splits a manifest into its records.
func manifestRecords(tb testing.TB, manifest []byte) [][]byte {
	r := wal.NewReader(bytes.NewReader(manifest), int64(len(manifest)))
	var recs [][]byte
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return recs
		} else if err != nil {
			tb.Fatal(err)
		}
		recs = append(recs, bytes.Clone(rec))
	}
}

// TestVersionEditSeeds checks that FuzzVersionEdit starts from real edits:
// every record of the seed manifests decodes.
func TestVersionEditSeeds(t *testing.T) {
	n := 0
	for _, m := range manifestSeeds(t) {
		for i, rec := range manifestRecords(t, m) {
			if _, _, err := lsm.ReencodeVersionEdit(rec); err != nil {
				t.Errorf("record %d: %v", i, err)
			}
			n++
		}
	}
	if n < 5 {
		t.Fatalf("only %d seed records", n)
	}
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
