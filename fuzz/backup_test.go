package fuzz

import (
	"bytes"
	"testing"

	"github.com/tabuladb/tabula/backup"
)

// FuzzBackupIndex feeds arbitrary bytes to the parser of a backup's index
// (BACKUP, docs/backup.md): it must return an index or an error, never
// panic; an index it accepts encodes back to the very same bytes, and
// every file name it accepts stays inside the backup directory.
func FuzzBackupIndex(f *testing.F) {
	good := (&backup.Index{Version: 1, Seq: 4711, Files: []backup.File{
		{Name: "000004.sst", Size: 1234, XXHash: 0x0123456789abcdef},
		{Name: "000007.log", Size: 0, XXHash: 0xef46db3751d8e999},
		{Name: "CURRENT", Size: 16, XXHash: 42},
		{Name: "MANIFEST-000009", Size: 77, XXHash: 1 << 63},
	}}).Encode()
	f.Add(good)
	f.Add((&backup.Index{Version: 1}).Encode())
	f.Add(good[:len(good)-1])
	f.Add(bytes.Replace(good, []byte("seq 4711"), []byte("seq 4712"), 1))
	f.Add([]byte("tabula-backup 2\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		x, err := backup.ParseIndex(data)
		if err != nil {
			return
		}
		if again := x.Encode(); !bytes.Equal(again, data) {
			t.Fatalf("accepted index re-encodes differently:\n%q\n%q", data, again)
		}
		for _, file := range x.Files {
			if bytes.ContainsAny([]byte(file.Name), "/\\") || file.Name == "." || file.Name == ".." {
				t.Fatalf("accepted file name %q leaves the directory", file.Name)
			}
		}
	})
}
