package fuzz

import (
	"bytes"
	"context"
	"testing"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/vfs"
)

// FuzzStoreSnapshot feeds the store-snapshot restore (docs/snapshot.md)
// arbitrary bytes: it must refuse with partition.ErrBadSnapshot, or
// build a store whose own snapshot restores to the same stream.
func FuzzStoreSnapshot(f *testing.F) {
	opts := func(fs vfs.FS) *partition.Options {
		return &partition.Options{LSM: lsm.Options{FS: fs, MemTableSize: 1 << 20}}
	}
	seed, err := partition.Open("/seed", opts(vfs.NewMem()))
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	seed.CreateTable(ctx, "devstoreaccount1", "t")
	seed.InsertEntity(ctx, "devstoreaccount1", "t", &odata.Entity{PartitionKey: "p", RowKey: "r",
		Properties: []odata.Property{{Name: "N", Value: odata.Int32Value(1)}}})
	var buf bytes.Buffer
	ss := seed.Snapshot()
	ss.WriteTo(&buf)
	ss.Close()
	seed.Close()
	f.Add(buf.Bytes())
	f.Add([]byte("TBLSNAP\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := partition.RestoreSnapshot("/r", opts(vfs.NewMem()), bytes.NewReader(data))
		if err != nil {
			// Refused: as a bad stream (ErrBadSnapshot), or, well formed,
			// as a store the table service cannot open (a catalog value it
			// cannot read). Either way, no panic and no store.
			return
		}
		defer s.Close()
		var again bytes.Buffer
		ss := s.Snapshot()
		defer ss.Close()
		if _, err := ss.WriteTo(&again); err != nil {
			t.Fatal(err)
		}
		s2, err := partition.RestoreSnapshot("/r2", opts(vfs.NewMem()), bytes.NewReader(again.Bytes()))
		if err != nil {
			t.Fatalf("a restored store's snapshot does not restore: %v", err)
		}
		s2.Close()
	})
}
