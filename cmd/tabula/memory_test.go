package main

import (
	"context"
	"os"
	"testing"

	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
)

// TestOpenInMemoryStore: an in-memory store works like any other, touches
// no file, and each one is separate and starts empty.
func TestOpenInMemoryStore(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	ctx := context.Background()
	a, err := openInMemoryStore()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateTable(ctx, "devstoreaccount1", "mem"); err != nil {
		t.Fatal(err)
	}
	ops := []partition.Op{
		{Kind: partition.OpInsert, Entity: &odata.Entity{PartitionKey: "p", RowKey: "1", Properties: []odata.Property{{Name: "N", Value: odata.Int64Value(1 << 60)}}}},
		{Kind: partition.OpInsert, Entity: &odata.Entity{PartitionKey: "p", RowKey: "2"}},
	}
	if _, err := a.ExecuteBatch(ctx, "devstoreaccount1", "mem", ops); err != nil {
		t.Fatal(err)
	}
	se, err := a.GetEntity(ctx, "devstoreaccount1", "mem", "p", "1")
	if err != nil {
		t.Fatal(err)
	}
	if e, err := se.Entity(); err != nil || e.Properties[0].Value.Int64() != 1<<60 {
		t.Fatalf("entity %+v, %v", e, err)
	}
	// A flush goes to the in-memory filesystem too.
	if err := a.DB().Flush(); err != nil {
		t.Fatal(err)
	}

	b, err := openInMemoryStore()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetTable(ctx, "devstoreaccount1", "mem"); !partition.IsCode(err, partition.CodeTableNotFound) {
		t.Fatalf("a second in-memory store sees the first one's table: %v", err)
	}
	for _, s := range []*partition.Store{a, b} {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{dir, inMemoryDir} {
		entries, err := os.ReadDir(d)
		if d == inMemoryDir {
			if err == nil {
				t.Fatalf("%s exists on disk", d)
			}
			continue
		}
		if err != nil || len(entries) != 0 {
			t.Fatalf("the in-memory stores wrote into the working directory: %v %v", entries, err)
		}
	}
}
