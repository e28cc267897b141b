package fuzz

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/vfs"
)

// FuzzSpanSnapshot feeds the span ingest (docs/snapshot.md, "Span
// snapshots") arbitrary bytes, into a store with data in and around the
// span: it must refuse with partition.ErrBadSpanSnapshot and leave the
// table as it was, or take the stream, leaving everything outside the
// span as it was and a span whose own snapshot is the stream again.
func FuzzSpanSnapshot(f *testing.F) {
	const (
		account = "devstoreaccount1"
		table   = "tbl"
		group   = 3
	)
	span := partition.Span{Account: account, Table: table, LowPartitionKey: "b", HighPartitionKey: "d"}
	ctx := context.Background()
	// newStore opens a store holding partitions a to e of the table.
	newStore := func(tb testing.TB, tag string) *partition.Store {
		s, err := partition.Open("/s", &partition.Options{LSM: lsm.Options{FS: vfs.NewMem(), MemTableSize: 1 << 20}})
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := s.CreateTable(ctx, account, table); err != nil {
			tb.Fatal(err)
		}
		for _, pk := range []string{"a", "b", "c", "c2", "d", "e"} {
			for _, rk := range []string{"", "1"} {
				e := &odata.Entity{PartitionKey: pk, RowKey: rk, Properties: []odata.Property{{Name: "V", Value: odata.StringValue(tag + pk + rk)}}}
				if _, err := s.InsertEntity(ctx, account, table, e); err != nil {
					tb.Fatal(err)
				}
			}
		}
		return s
	}
	dump := func(tb testing.TB, s *partition.Store, keep func(pk string) bool) string {
		page, _, err := s.QueryEntitiesPage(ctx, account, table, partition.EntityQuery{})
		if err != nil {
			tb.Fatal(err)
		}
		var b bytes.Buffer
		for _, e := range page {
			if keep(e.PartitionKey) {
				fmt.Fprintf(&b, "%q/%q@%d %x\n", e.PartitionKey, e.RowKey, e.Timestamp, e.Value)
			}
		}
		return b.String()
	}
	inSpan := func(pk string) bool { return pk >= span.LowPartitionKey && pk < span.HighPartitionKey }
	outside := func(pk string) bool { return !inSpan(pk) }
	all := func(string) bool { return true }
	stream := func(tb testing.TB, s *partition.Store) []byte {
		ss, err := s.SnapshotSpan(group, span)
		if err != nil {
			tb.Fatal(err)
		}
		defer ss.Close()
		var b bytes.Buffer
		if _, err := ss.WriteTo(&b); err != nil {
			tb.Fatal(err)
		}
		return b.Bytes()
	}

	seed := newStore(f, "seed")
	f.Add(stream(f, seed))
	merged := withMergedGroups(stream(f, seed), 9, 12)
	if _, err := partition.CheckSpanSnapshot(group, span, bytes.NewReader(merged)); err != nil {
		f.Fatalf("the version 2 seed: %v", err)
	}
	f.Add(merged)
	seed.Close()
	empty := newStore(f, "empty")
	for _, rk := range []string{"", "1"} {
		for _, pk := range []string{"b", "c", "c2"} {
			if err := empty.DeleteEntity(ctx, account, table, pk, rk, "*"); err != nil {
				f.Fatal(err)
			}
		}
	}
	f.Add(stream(f, empty))
	empty.Close()
	f.Add([]byte("TBLSPAN\x01"))

	f.Fuzz(func(t *testing.T, data []byte) {
		s := newStore(t, "target")
		defer s.Close()
		before := dump(t, s, all)
		_, err := s.IngestSpan(group, span, bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, partition.ErrBadSpanSnapshot) {
				t.Fatalf("refused, but not as a bad stream: %v", err)
			}
			if dump(t, s, all) != before {
				t.Fatal("a refused stream changed the table")
			}
			return
		}
		if dump(t, s, outside) != dumpOf(before, outside) {
			t.Fatal("the ingest changed entities outside its span")
		}
		page, _, err := s.QueryEntitiesPage(ctx, account, table, partition.EntityQuery{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			if _, err := e.Entity(); err != nil {
				t.Fatalf("an ingested entity does not decode: %v", err)
			}
		}
		// A stream may name the table in any case; the span's own
		// snapshot names it as created.
		if again := stream(t, s); streamTable(data) == table && !bytes.Equal(data, again) {
			t.Fatalf("the span's own snapshot is not the stream it took:\n%x\n%x", data, again)
		}
	})
}

// dumpOf keeps the lines of a dump whose PartitionKey keep accepts.
func dumpOf(d string, keep func(pk string) bool) string {
	var out bytes.Buffer
	for _, line := range bytes.SplitAfter([]byte(d), []byte("\n")) {
		var pk string
		if _, err := fmt.Sscanf(string(line), "%q/", &pk); err == nil && keep(pk) {
			out.Write(line)
		}
	}
	return out.String()
}

// withMergedGroups turns a version 1 span stream into the version 2
// stream of the same span having merged groups ids: the list goes after
// the header's group and applied index (docs/snapshot.md), and the
// checksum is summed again.
func withMergedGroups(v1 []byte, ids ...uint64) []byte {
	off := 8
	for range 4 { // account, table, low, high: short strings here
		off += 1 + int(v1[off])
	}
	off += 16
	v2 := append([]byte("TBLSPAN\x02"), v1[8:off]...)
	v2 = binary.AppendUvarint(v2, uint64(len(ids)))
	for _, id := range ids {
		v2 = binary.AppendUvarint(v2, id)
	}
	v2 = append(v2, v1[off:len(v1)-8]...)
	return binary.BigEndian.AppendUint64(v2, xxhash.Sum64(v2))
}

// streamTable returns the table name a stream's header holds, after the
// magic and the account, whose uvarint lengths are one byte here.
func streamTable(data []byte) string {
	off := 8
	for range 2 {
		if off >= len(data) || int(data[off]) >= 0x80 || off+1+int(data[off]) > len(data) {
			return ""
		}
		if off > 8 {
			return string(data[off+1 : off+1+int(data[off])])
		}
		off += 1 + int(data[off])
	}
	return ""
}
