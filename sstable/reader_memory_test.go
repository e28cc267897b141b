package sstable

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/tabuladb/tabula/internal/base"
	"github.com/tabuladb/tabula/internal/manual"
)

// clusteredTable builds a table of n keys shaped like the table service's
// clustered index (long shared prefix), with incompressible 200-byte
// values, and returns it with its user keys.
func clusteredTable(t testing.TB, n int) ([]byte, [][]byte) {
	rng := rand.New(rand.NewPCG(7, 7))
	entries := make([]kv, n)
	keys := make([][]byte, n)
	for i := range entries {
		keys[i] = fmt.Appendf(nil, "devstoreaccount1/t0001/pk%06d/rk%06d", i/100, 2*(i%100))
		v := make([]byte, 200)
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		entries[i] = kv{base.MakeInternalKey(keys[i], base.SeqNum(i+1), base.KindSet), v}
	}
	data, _ := buildTable(t, entries, WriterOptions{})
	return data, keys
}

// mapsOutsideHeap asks internal/manual whether it maps a large buffer
// outside the Go heap here (on Linux; elsewhere the heap holds it).
func mapsOutsideHeap() bool {
	b := manual.New(1 << 20)
	defer b.Free()
	return b.Mapped()
}

// TestReaderMetaOutsideHeap: a table's index and filter, large enough to
// be mapped, cost the Go heap nothing per open Reader (where they can be
// mapped), every key is found through them and every absent key missed,
// the index keeps only the part of each separator past the common
// prefix, and a closed Reader refuses use instead of answering from
// memory it gave back.
func TestReaderMetaOutsideHeap(t *testing.T) {
	data, keys := clusteredTable(t, 20_000)
	r := openTable(t, data, ReaderOptions{})
	if r.filter == nil {
		t.Fatal("no filter")
	}
	mapsHere := mapsOutsideHeap()
	if mapped := r.index.mem.Mapped() && r.filter.mem.Mapped(); mapped != mapsHere {
		t.Fatalf("index (%d blocks) and filter mapped outside the heap: %v, want %v on %s", r.index.len(), mapped, mapsHere, runtime.GOOS)
	}
	if got := string(r.index.common); got != "devstoreaccount1/t0001/pk000" {
		t.Errorf("common prefix %q", got)
	}
	if perBlock := float64(len(r.index.suffixes)) / float64(r.index.len()); perBlock > 14 {
		t.Errorf("%.1f suffix bytes per separator: the common prefix is stored again", perBlock)
	}
	for i, k := range keys {
		v, found, err := r.Get(k, base.SeqNumMax)
		if err != nil || !found || len(v.Bytes) != 200 {
			t.Fatalf("Get(%s): found %v, %d bytes, err %v", k, found, len(v.Bytes), err)
		}
		v.Release()
		missing := fmt.Appendf(nil, "devstoreaccount1/t0001/pk%06d/rk%06d", i/100, 2*(i%100)+1)
		if _, found, err := r.Get(missing, base.SeqNumMax); err != nil || found {
			t.Fatalf("Get(%s) of an absent key: found %v, err %v", missing, found, err)
		}
	}
	it := r.NewIter(keys[100], keys[300])
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if k := it.Key().UserKey; !bytes.Equal(k, keys[100+n]) {
			t.Fatalf("scan entry %d: %s", n, k)
		}
		n++
	}
	if err := it.Close(); err != nil || n != 200 {
		t.Fatalf("bounded scan: %d entries, err %v", n, err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err == nil {
		t.Error("a second Close succeeded")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Get on a closed Reader did not panic")
			}
		}()
		r.Get(keys[0], base.SeqNumMax)
	}()

	if !mapsHere {
		return // the heap holds every index and filter (internal/manual)
	}
	// Many open Readers of the table: the heap grows by far less than
	// their indexes and filters.
	const readers = 50
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	open := make([]*Reader, readers)
	for i := range open {
		open[i] = openTable(t, data, ReaderOptions{})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	meta := len(open[0].index.mem.Bytes()) + len(open[0].filter.mem.Bytes())
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > int64(readers*meta/4) {
		t.Errorf("the heap grew by %d bytes for %d readers of %d bytes of index and filter each", grew, readers, meta)
	}
	for _, r := range open {
		r.Close()
	}
}
