package export

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/tabuladb/tabula/internal/edmtest"
	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/vfs"
)

func memStore(t *testing.T) *partition.Store {
	t.Helper()
	s, err := partition.Open("/store", &partition.Options{LSM: lsm.Options{FS: vfs.NewMem()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	src := memStore(t)
	for _, tr := range []partition.TableRef{{Account: "devstoreaccount1", Name: "Edges"}, {Account: "other", Name: "Empty"}} {
		if _, err := src.CreateTable(ctx, tr.Account, tr.Name); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range edmtest.EdgeEntities() {
		if _, err := src.InsertEntity(ctx, "devstoreaccount1", "Edges", e); err != nil {
			t.Fatalf("insert %q/%q: %v", e.PartitionKey, e.RowKey, err)
		}
	}
	var buf bytes.Buffer
	tables, entities, err := Export(ctx, src, &buf, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tables != 2 || entities != int64(len(edmtest.EdgeEntities())) {
		t.Fatalf("exported %d tables, %d entities", tables, entities)
	}
	sum, err := Check(bytes.NewReader(buf.Bytes()))
	if err != nil || sum.Entities != entities || sum.Size != int64(buf.Len()) {
		t.Fatalf("Check = %+v, %v", sum, err)
	}
	dst := memStore(t)
	st, err := Import(ctx, dst, bytes.NewReader(buf.Bytes()), ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Tables != 2 || st.Entities != entities {
		t.Fatalf("imported %+v", st)
	}
	edmtest.SameStores(t, edmtest.StoreEntities(t, dst), edmtest.StoreEntities(t, src))

	// Only the tables asked for.
	buf.Reset()
	if tables, _, err := Export(ctx, src, &buf, func(tr partition.TableRef) bool { return tr.Name == "Empty" }); err != nil || tables != 1 {
		t.Fatalf("filtered export: %d tables, %v", tables, err)
	}
}

// TestImportResumes interrupts an import after a few batches, checks that
// every batch is whole or absent, and resumes it from the line its last
// progress report named: the result is the whole file, and the resumed run
// imports only what the first did not.
func TestImportResumes(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.Table("devstoreaccount1", "Resume")
	const partitions, perPartition = 40, 7
	for p := range partitions {
		for r := range perPartition {
			w.Entity(&odata.Entity{PartitionKey: fmt.Sprintf("p%03d", p), RowKey: fmt.Sprintf("r%d", r), Properties: []odata.Property{{Name: "N", Value: odata.Int64Value(int64(p*100 + r))}}})
		}
	}
	// A partition larger than one batch.
	for r := range 250 {
		w.Entity(&odata.Entity{PartitionKey: "zbig", RowKey: fmt.Sprintf("r%03d", r)})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	file := buf.Bytes()
	want := memStore(t)
	if _, err := Import(ctx, want, bytes.NewReader(file), ImportOptions{}); err != nil {
		t.Fatal(err)
	}

	s := memStore(t)
	errStop := errors.New("interrupted")
	var resume int
	var done int64
	st, err := Import(ctx, s, bytes.NewReader(file), ImportOptions{Progress: func(next int, n int64) error {
		resume, done = next, n
		if n >= 3*perPartition {
			return errStop
		}
		return nil
	}})
	if !errors.Is(err, errStop) || st.Batches != 3 {
		t.Fatalf("interrupted import: %+v, %v", st, err)
	}
	got := edmtest.StoreEntities(t, s)["devstoreaccount1/Resume"]
	if len(got) != 3*perPartition {
		t.Fatalf("after the interruption the store holds %d entities, want the 3 batches' %d", len(got), 3*perPartition)
	}
	st, err = Import(ctx, s, bytes.NewReader(file), ImportOptions{ResumeLine: resume})
	if err != nil {
		t.Fatal(err)
	}
	if total := int64(partitions*perPartition + 250); st.Entities != total-done {
		t.Fatalf("the resumed import wrote %d entities, want the %d left", st.Entities, total-done)
	}
	edmtest.SameStores(t, edmtest.StoreEntities(t, s), edmtest.StoreEntities(t, want))
	if st.Batches != partitions-3+3 { // zbig: 100 + 100 + 50
		t.Fatalf("resumed import ran %d batches", st.Batches)
	}
}
