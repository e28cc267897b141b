package lsm

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"strings"
	"testing"

	"encoding/binary"
	"github.com/cespare/xxhash/v2"
	"github.com/tabuladb/tabula/sstable"
	"github.com/tabuladb/tabula/vfs"
	"github.com/tabuladb/tabula/wal"
)

// rewriteManifestVersion rewrites the current manifest of the closed DB in
// dir so that its first edit records format version ver followed by the
// fields in extra, every record properly framed and checksummed: what a
// newer build would have written.
func rewriteManifestVersion(t *testing.T, fs vfs.FS, dir string, ver uint64, extra []byte) {
	t.Helper()
	rewriteManifest(t, fs, dir, func(i int, e *versionEdit) []byte {
		if i > 0 {
			return e.encode()
		}
		if e.formatVersion != manifestFormatVersion {
			t.Fatalf("first manifest edit: %+v", e)
		}
		e.formatVersion = ver
		return append(e.encode(), extra...)
	})
}

// rewriteManifest rewrites the current manifest of the closed DB in dir,
// its i-th edit replaced by what change makes of it, every record properly
// framed and checksummed.
func rewriteManifest(t *testing.T, fs vfs.FS, dir string, change func(i int, e *versionEdit) []byte) {
	t.Helper()
	if fs == nil {
		fs = vfs.Default()
	}
	d, err := Describe(dir, fs)
	if err != nil {
		t.Fatal(err)
	}
	f, err := fs.Open(d.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	r := wal.NewReader(f, info.Size())
	var recs [][]byte
	for i := 0; ; i++ {
		rec, err := r.Next()
		if err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		e, err := decodeVersionEdit(rec)
		if err != nil {
			t.Fatalf("manifest edit %d: %v", i, err)
		}
		recs = append(recs, change(i, e))
	}
	f.Close()

	out, err := fs.Create(d.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	w := wal.NewWriter(out, wal.WriterOptions{})
	for _, rec := range recs {
		if _, err := w.WriteRecord(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// dirContents returns every file of dir with its contents.
func dirContents(t *testing.T, fs vfs.FS, dir string) map[string][]byte {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, name := range names {
		f, err := fs.Open(dir + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		files[name], err = io.ReadAll(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// newTestDB creates a DB in fs holding one key in a table, and closes it.
func newTestDB(t *testing.T, fs vfs.FS) {
	t.Helper()
	db := openTestDB(t, "/db", &Options{FS: fs})
	if err := db.Set([]byte("k"), []byte("v"), nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// checkNamesVersions fails unless err is a refusal that names the version
// found and the newest this build reads.
func checkNamesVersions(t *testing.T, err error, found, newest uint64) {
	t.Helper()
	if err == nil {
		t.Fatalf("format version %d accepted; this build reads up to %d", found, newest)
	}
	msg := err.Error()
	if !strings.Contains(msg, fmt.Sprintf("version %d", found)) || !strings.Contains(msg, fmt.Sprint(newest)) {
		t.Fatalf("error %q does not name version %d and this build's %d", msg, found, newest)
	}
}

// TestOpenRefusesNewerManifestVersion checks that a DB whose manifest a
// newer build wrote is refused, naming the version found and the newest
// this build reads, rather than opened and misread. A newer build may
// also record fields this one does not know; the version must still be
// what the refusal names, not the unknown field.
func TestOpenRefusesNewerManifestVersion(t *testing.T) {
	// A field tag no version-1 build knows, with a value.
	unknownField := []byte{tagNewFile + 1, 1}
	for _, tc := range []struct {
		name  string
		extra []byte
	}{
		{"same fields", nil},
		{"unknown field", unknownField},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			newTestDB(t, fs)
			// The rewrite itself must leave an openable DB.
			rewriteManifestVersion(t, fs, "/db", manifestFormatVersion, nil)
			db := openTestDB(t, "/db", &Options{FS: fs})
			if got := mustGet(t, db, "k"); got != "v" {
				t.Fatalf("after rewriting the manifest unchanged: k = %q", got)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}

			newer := uint64(manifestFormatVersion + 1)
			rewriteManifestVersion(t, fs, "/db", newer, tc.extra)
			before := dirContents(t, fs, "/db")
			db, err := Open("/db", &Options{FS: fs})
			if err == nil {
				db.Close()
			}
			checkNamesVersions(t, err, newer, manifestFormatVersion)
			// The newer build must find its DB as it left it.
			if after := dirContents(t, fs, "/db"); !maps.EqualFunc(before, after, bytes.Equal) {
				t.Fatalf("the refused Open changed the directory: %d files before, %d after", len(before), len(after))
			}
			_, err = Describe("/db", fs)
			checkNamesVersions(t, err, newer, manifestFormatVersion)
		})
	}
}

// TestReadRefusesNewerTableVersion checks that a table whose footer
// records a newer format version (with a valid footer checksum) is
// refused, by Open or at the latest by the first read that needs it, with
// an error naming both versions, and not read as missing data.
func TestReadRefusesNewerTableVersion(t *testing.T) {
	fs := vfs.NewMem()
	newTestDB(t, fs)
	d, err := Describe("/db", fs)
	if err != nil {
		t.Fatal(err)
	}
	var tables []TableInfo
	for _, level := range d.Levels {
		tables = append(tables, level...)
	}
	if len(tables) != 1 {
		t.Fatalf("%d tables, want 1", len(tables))
	}
	name := makeFilename("/db", fileTypeTable, tables[0].FileNum)
	data := readAll(t, fs, name)
	// The footer layout of docs/sstable.md: the version at 48, the
	// checksum of bytes 0..52 at 52, in the last 68 bytes.
	ft := data[len(data)-68:]
	if v := binary.LittleEndian.Uint32(ft[48:]); v != sstable.FormatVersion {
		t.Fatalf("footer records version %d, want %d: layout changed?", v, sstable.FormatVersion)
	}
	newer := sstable.FormatVersion + 1
	binary.LittleEndian.PutUint32(ft[48:], newer)
	binary.LittleEndian.PutUint64(ft[52:], xxhash.Sum64(ft[:52]))
	writeFile(t, fs, name, data)

	db, err := Open("/db", &Options{FS: fs})
	if err == nil {
		_, err = db.Get([]byte("k"))
		db.Close()
	}
	checkNamesVersions(t, err, uint64(newer), uint64(sstable.FormatVersion))
	if !strings.Contains(err.Error(), fmt.Sprint(tables[0].FileNum)) {
		t.Fatalf("error %q does not name table %d", err, tables[0].FileNum)
	}
}
