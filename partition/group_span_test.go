package partition

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/odata"
)

// TestGroupSpans follows a range group's span through a split: a group
// that never split holds its whole table; the split, stamped by the
// parent's log, gives the parent the keys below the split and the child
// the rest, with the parent's applied index in the same batch, across a
// reopen; a split outside the span is refused; and a store that takes a
// span snapshot of the child takes its span with it, which a follower
// reads off the stream (CheckSpanSnapshotOf).
func TestGroupSpans(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	e.createTableInGroup("Halves", 5)
	whole := Span{Account: acct, Table: "Halves"}
	if sp, ok, err := e.s.GroupSpan(5); err != nil || !ok || sp != whole {
		t.Fatalf("GroupSpan(5) before any split = %+v, %v, %v", sp, ok, err)
	}
	if _, ok, err := e.s.GroupSpan(6); ok || err != nil {
		t.Fatalf("GroupSpan of a group the catalog lacks: %v, %v", ok, err)
	}
	for _, pk := range []string{"a", "k", "m", "z"} {
		sctx := WithStamp(ctx, Stamp{Group: 5, Index: 10, Timestamp: odata.DateTime(1000)})
		if _, err := e.s.Apply(sctx, acct, "Halves", Op{Kind: OpInsert, Entity: &odata.Entity{PartitionKey: pk, RowKey: "r"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.s.SplitTableRange(ctx, acct, "Halves", 5, "m", 9); err != nil {
		t.Fatal(err)
	}
	if sp, _, _ := e.s.GroupSpan(5); sp != whole {
		t.Fatalf("the catalog's split moved group 5's span before its log did: %+v", sp)
	}
	if mustRecorded(t, e.s, 5) || mustRecorded(t, e.s, 9) {
		t.Fatal("a span recorded before the split")
	}
	if err := e.s.SplitGroupSpan(WithStamp(ctx, Stamp{Group: 5, Index: 11}), 5, 9, "m"); err != nil {
		t.Fatal(err)
	}
	low := Span{Account: acct, Table: "Halves", HighPartitionKey: "m"}
	high := Span{Account: acct, Table: "Halves", LowPartitionKey: "m"}
	// Before any reopen: the split caches its records as it writes them
	// (lookups read no record from the store).
	if sp, _, err := e.s.GroupSpan(5); err != nil || sp != low || !mustRecorded(t, e.s, 5) {
		t.Fatalf("the parent's span right after the split = %+v, %v", sp, err)
	}
	e.reopen()
	if sp, _, err := e.s.GroupSpan(5); err != nil || sp != low {
		t.Fatalf("the parent's span after the split = %+v, %v; want %+v", sp, err, low)
	}
	if sp, _, err := e.s.GroupSpan(9); err != nil || sp != high {
		t.Fatalf("the child's span after the split = %+v, %v; want %+v", sp, err, high)
	}
	if a, err := e.s.AppliedIndex(5); err != nil || a != 11 {
		t.Fatalf("the parent's applied index after the split: %d, %v", a, err)
	}
	if a, err := e.s.AppliedIndex(9); err != nil || a != 11 {
		t.Fatalf("the child's applied index after the split: %d, %v; want the split's index, where its log starts", a, err)
	}
	for _, c := range []struct {
		group      uint64
		table, pk  string
		tbl, inKey bool
	}{{5, "halves", "a", true, true}, {5, "Halves", "m", true, false}, {9, "HALVES", "m", true, true}, {9, "halves", "zz", true, true},
		{9, "halves", "l", true, false}, {9, "other", "m", false, false}, {40, "halves", "a", false, false}} {
		if tbl, inKey, err := e.s.GroupHolds(c.group, acct, c.table, c.pk); err != nil || tbl != c.tbl || inKey != c.inKey {
			t.Errorf("GroupHolds(%d, %s, %q) = %v, %v, %v; want %v, %v", c.group, c.table, c.pk, tbl, inKey, err, c.tbl, c.inKey)
		}
	}
	for name, c := range map[string]struct {
		group uint64
		at    string
	}{"at the start": {5, ""}, "at the end": {5, "m"}, "past the end": {5, "x"}, "below the start": {9, "a"}} {
		if err := e.s.SplitGroupSpan(ctx, c.group, 12, c.at); !IsCode(err, CodeInvalidInput) {
			t.Errorf("a split %s: %v", name, err)
		}
	}
	if err := e.s.SplitGroupSpan(ctx, 40, 41, "c"); !IsCode(err, CodeTableNotFound) {
		t.Errorf("a split of a group the catalog lacks: %v", err)
	}

	// A follower of the child takes its span from a snapshot.
	f := newEnv(t, nil)
	f.createTableInGroup("Halves", 5)
	if err := f.s.SplitTableRange(ctx, acct, "Halves", 5, "m", 9); err != nil {
		t.Fatal(err)
	}
	stream := spanStream(t, e.s, 9, high)
	sp, _, err := CheckSpanSnapshotOf(9, acct, "halves", bytes.NewReader(stream))
	if err != nil || sp.LowPartitionKey != "m" || sp.HighPartitionKey != "" {
		t.Fatalf("CheckSpanSnapshotOf = %+v, %v", sp, err)
	}
	if _, _, err := CheckSpanSnapshotOf(9, acct, "other", bytes.NewReader(stream)); !errors.Is(err, ErrBadSpanSnapshot) {
		t.Fatalf("a stream of another table passed: %v", err)
	}
	if _, _, err := CheckSpanSnapshotOf(5, acct, "halves", bytes.NewReader(stream)); !errors.Is(err, ErrBadSpanSnapshot) {
		t.Fatalf("a stream of another group passed: %v", err)
	}
	if got, _, err := f.s.GroupSpan(9); err != nil || got != high || mustRecorded(t, f.s, 9) {
		t.Fatalf("the follower's child span from the catalog = %+v, %v", got, err)
	}
	if _, err := f.s.IngestSpan(9, sp, bytes.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	if got, _, err := f.s.GroupSpan(9); err != nil || got != high {
		t.Fatalf("the follower's child span after the ingest = %+v, %v", got, err)
	}
	if page, _, err := f.s.QueryEntitiesPage(ctx, acct, "Halves", EntityQuery{}); err != nil || len(page) != 2 || page[0].PartitionKey != "m" {
		t.Fatalf("the follower holds %+v, %v; want the child's m and z", page, err)
	}
}

// TestGroupSpanRecordRefusesDamage feeds the span record's decoder
// broken records: each is corruption.
func TestGroupSpanRecordRefusesDamage(t *testing.T) {
	good := groupSpan{tableID: 7, span: Span{Account: acct, Table: "T", LowPartitionKey: "a", HighPartitionKey: "b"}}
	frozen := good
	frozen.frozen = true
	merged := good.withMerged(3).withMerged(5).withMerged(12)
	frozenMerged := merged
	frozenMerged.frozen = true
	for _, g := range []groupSpan{good, frozen, merged, frozenMerged} {
		if got, err := decodeGroupSpan(encodeGroupSpan(g)); err != nil || !reflect.DeepEqual(got, g) {
			t.Fatalf("round trip: %+v %v", got, err)
		}
	}
	if v := encodeGroupSpan(good); v[0] != 1 {
		t.Fatalf("a span that is not frozen is recorded as version %d, want 1 (as before merges)", v[0])
	}
	if v := encodeGroupSpan(frozen); v[0] != 2 {
		t.Fatalf("a frozen span that merged nothing is recorded as version %d, want 2 (as before merged lists)", v[0])
	}
	var many groupSpan
	for id := range uint64(40) {
		many = many.withMerged(id + 1)
	}
	if len(many.merged) != MaxMergedRecorded || many.merged[0] != 40-MaxMergedRecorded+1 || many.merged[MaxMergedRecorded-1] != 40 {
		t.Fatalf("40 merges recorded as %v, want the latest %d", many.merged, MaxMergedRecorded)
	}
	mergedRecord := encodeGroupSpan(merged) // ... flags 0, count 3, 3, 5, 12
	listAt := len(mergedRecord) - 4
	with := func(f func(*groupSpan)) []byte {
		g := good
		f(&g)
		return encodeGroupSpan(g)
	}
	for name, v := range map[string][]byte{
		"empty":          {},
		"version 2":      {2, 1, 0, 0, 0, 0},
		"version 3":      append([]byte{3}, encodeGroupSpan(frozen)[1:]...),
		"unknown flag":   append(encodeGroupSpan(frozen)[:len(encodeGroupSpan(frozen))-1], 3),
		"no flags":       append([]byte{2}, encodeGroupSpan(good)[1:]...),
		"flags alone":    {2, 1},
		"table id 0":     with(func(g *groupSpan) { g.tableID = 0 }),
		"cut":            encodeGroupSpan(good)[:9],
		"trailing bytes": append(encodeGroupSpan(good), 0),
		"high below low": with(func(g *groupSpan) { g.span.HighPartitionKey = "" + "\x00" }),
		"empty span":     with(func(g *groupSpan) { g.span.HighPartitionKey = "a" }),
		"merged none":    append(slices.Clone(mergedRecord[:listAt]), 0),
		"merged group 0": append(slices.Clone(mergedRecord[:listAt]), 1, 0),
		"merged 17":      append(slices.Clone(mergedRecord[:listAt]), 17, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17),
		"merged cut":     mergedRecord[:len(mergedRecord)-1],
		"merged flag 2":  append(append(slices.Clone(mergedRecord[:listAt-1]), 2), mergedRecord[listAt:]...),
		"merged no list": mergedRecord[:listAt],
	} {
		if _, err := decodeGroupSpan(v); !errors.Is(err, lsm.ErrCorruption) {
			t.Errorf("%s: %v, want corruption", name, err)
		}
	}
}

// TestQueryWithinARange runs queries bounded to a range of PartitionKeys,
// as a cluster's range group answers them: only keys inside are read; a
// query whose keys go on past the range's end returns a continuation at
// that end once it has read the rest (paged or not), and one that stays
// inside ends there.
func TestQueryWithinARange(t *testing.T) {
	e := newEnv(t, nil)
	e.createTable("ranged")
	for _, pk := range []string{"a", "g", "h", "k", "o", "p", "x"} {
		mustApply(t, e.s, "ranged", Op{Kind: OpInsert, Entity: ent(pk, "r")})
	}
	within := &PartitionRange{Low: "g", High: "p"}
	walk := func(q EntityQuery) (got []string, last Continuation) {
		t.Helper()
		for {
			page, c, err := e.s.QueryEntitiesPage(context.Background(), acct, "ranged", q)
			if err != nil {
				t.Fatal(err)
			}
			for _, se := range page {
				got = append(got, se.PartitionKey)
			}
			if c.IsZero() {
				return got, c
			}
			if pk, _, _ := c.Position(); pk == "p" {
				return got, c // the range's end: the next range's to answer
			}
			q.NextPartitionKey, q.NextRowKey = c.NextPartitionKey, c.NextRowKey
		}
	}
	atEnd := NewContinuation("p", "")
	for name, c := range map[string]struct {
		q    EntityQuery
		want string
		cont Continuation
	}{
		"everything":          {EntityQuery{Within: within}, "g h k o", atEnd},
		"paged":               {EntityQuery{Within: within, Top: 2}, "g h k o", atEnd},
		"a partition past it": {EntityQuery{Within: within, Filter: "PartitionKey eq 'x'"}, "", atEnd},
		"inside it":           {EntityQuery{Within: within, Filter: "PartitionKey lt 'l'"}, "g h k", Continuation{}},
		"the last range":      {EntityQuery{Within: &PartitionRange{Low: "p"}}, "p x", Continuation{}},
	} {
		got, cont := walk(c.q)
		if s := fmt.Sprint(got); s != "["+c.want+"]" || cont != c.cont {
			t.Errorf("%s: %v then %+v; want [%s] then %+v", name, s, cont, c.want, c.cont)
		}
	}
}

// TestGroupSpanNeedsNoCatalog splits a group's span on a store whose
// catalog has not recorded the split yet (a replica may apply the parent
// group's split before the system group's record of it): the child's
// span is known from its own record, and holds the same keys.
func TestGroupSpanNeedsNoCatalog(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	e.createTableInGroup("Early", 5)
	if err := e.s.SplitGroupSpan(WithStamp(ctx, Stamp{Group: 5, Index: 3}), 5, 9, "m"); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	if _, ok := mustGroupTable(t, e.s, 9); ok {
		t.Fatal("the catalog knows group 9")
	}
	if sp, ok, err := e.s.GroupSpan(9); err != nil || !ok || sp != (Span{Account: acct, Table: "Early", LowPartitionKey: "m"}) {
		t.Fatalf("GroupSpan(9) = %+v, %v, %v", sp, ok, err)
	}
	if tbl, held, err := e.s.GroupHolds(9, acct, "early", "x"); err != nil || !tbl || !held {
		t.Fatalf("GroupHolds(9, x) = %v, %v, %v", tbl, held, err)
	}
}

// FuzzGroupSpanRecord feeds the span record's decoder (01 08,
// docs/keys.md) garbage: it never panics, refuses as corruption, and a
// record it takes encodes to one that decodes the same.
func FuzzGroupSpanRecord(f *testing.F) {
	g := groupSpan{tableID: 7, span: Span{Account: acct, Table: "T", LowPartitionKey: "a", HighPartitionKey: "b"}}
	f.Add(encodeGroupSpan(g))
	g.frozen = true
	f.Add(encodeGroupSpan(g))
	f.Add([]byte{2, 1, 0, 0, 0, 0, 1})
	f.Add(encodeGroupSpan(g.withMerged(3).withMerged(12)))
	f.Fuzz(func(t *testing.T, v []byte) {
		g, err := decodeGroupSpan(v)
		if err != nil {
			if !errors.Is(err, lsm.ErrCorruption) {
				t.Fatalf("%x: %v, not corruption", v, err)
			}
			return
		}
		if again, err := decodeGroupSpan(encodeGroupSpan(g)); err != nil || !reflect.DeepEqual(again, g) {
			t.Fatalf("%x decodes to %+v, which encodes to one that decodes to %+v, %v", v, g, again, err)
		}
	})
}
