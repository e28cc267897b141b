package partition

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/vfs"
)

// snapshotOf fills a store and returns its snapshot stream and dump.
func snapshotOf(t *testing.T) ([]byte, string) {
	t.Helper()
	e := newEnv(t, nil)
	e.createTable("snap")
	e.createTable("other")
	for i := range 300 {
		mustApply(t, e.s, "snap", Op{Kind: OpInsert, Entity: ent(fmt.Sprintf("p%d", i%7), fmt.Sprintf("r%03d", i), "N", i, "S", strings.Repeat("x", i%50))})
	}
	if err := e.s.SetTableACL(context.Background(), acct, "snap", []SignedIdentifier{{ID: "p", Permission: "r"}}); err != nil {
		t.Fatal(err)
	}
	if err := e.s.DeleteTable(context.Background(), acct, "other"); err != nil {
		t.Fatal(err)
	}
	ss := e.s.Snapshot()
	defer ss.Close()
	var buf bytes.Buffer
	n, err := ss.WriteTo(&buf)
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("WriteTo: %d of %d bytes, %v", n, buf.Len(), err)
	}
	return buf.Bytes(), storeDump(t, e.s)
}

func storeDump(t *testing.T, s *Store) string {
	t.Helper()
	ctx := context.Background()
	page, _, err := s.QueryEntitiesPage(ctx, acct, "snap", EntityQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range page {
		fmt.Fprintf(&b, "%s/%s@%d %x\n", e.PartitionKey, e.RowKey, e.Timestamp, e.Value)
	}
	acl, err := s.GetTableACL(ctx, acct, "snap")
	if err != nil {
		t.Fatal(err)
	}
	tables, err := s.QueryTables(ctx, acct, TableQuery{})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "acl %v tables %v", acl, tables.Tables)
	return b.String()
}

func restoreOpts(fs vfs.FS) *Options {
	return &Options{LSM: lsm.Options{FS: fs, MemTableSize: 1 << 20}}
}

func TestSnapshotRestores(t *testing.T) {
	stream, want := snapshotOf(t)
	fs := vfs.NewMem()
	s, err := RestoreSnapshot("/restored", restoreOpts(fs), bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := storeDump(t, s); got != want {
		t.Fatalf("the restored store differs:\n%s\n---\n%s", got, want)
	}
	// A restored store is a store: writes go on.
	if _, err := s.Apply(context.Background(), acct, "snap", Op{Kind: OpInsert, Entity: ent("new", "row")}); err != nil {
		t.Fatal(err)
	}
	if _, err := RestoreSnapshot("/restored", restoreOpts(fs), bytes.NewReader(stream)); err == nil {
		t.Fatal("a restore into a store's directory was taken")
	}
}

// TestSnapshotRefusesDamage cuts the stream at many points and flips
// bytes through it: every one is refused, and the directory it was
// restored into is not taken for a store.
func TestSnapshotRefusesDamage(t *testing.T) {
	stream, _ := snapshotOf(t)
	try := func(what string, data []byte) {
		t.Helper()
		fs := vfs.NewMem()
		s, err := RestoreSnapshot("/r", restoreOpts(fs), bytes.NewReader(data))
		if err == nil {
			s.Close()
			t.Fatalf("%s: restored", what)
		}
		if !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("%s: %v, not ErrBadSnapshot", what, err)
		}
		if s, err := Open("/r", restoreOpts(fs)); err == nil {
			s.Close()
			t.Fatalf("%s: the directory of a failed restore opens as a store", what)
		}
	}
	for _, n := range []int{0, 3, 8, 9, 100, len(stream) / 2, len(stream) - 9, len(stream) - 1} {
		try(fmt.Sprintf("cut to %d of %d bytes", n, len(stream)), stream[:n])
	}
	for _, i := range []int{0, 7, 8, 20, len(stream) / 3, len(stream) / 2, len(stream) - 12, len(stream) - 1} {
		bad := bytes.Clone(stream)
		bad[i] ^= 0x40
		try(fmt.Sprintf("byte %d flipped", i), bad)
	}
	try("a byte past the end", append(bytes.Clone(stream), 0))
}
