package partition

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/tabuladb/tabula/odata"
)

// TestGroupMerge follows two ranges of a table through a merge: the
// catalog gives the right range's keys to the left group at once; the
// right group's span, frozen in its own log, refuses every key and keeps
// its entities and applied index across a reopen; the left group takes
// it only when frozen, in the batch of its own applied index; after
// that the right group has no record left and every entity is read
// where it was.
func TestGroupMerge(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	e.createTableInGroup("Halves", 5)
	for _, pk := range []string{"a", "m", "z"} {
		sctx := WithStamp(ctx, Stamp{Group: 5, Index: 10, Timestamp: odata.DateTime(1000)})
		if _, err := e.s.Apply(sctx, acct, "Halves", Op{Kind: OpInsert, Entity: &odata.Entity{PartitionKey: pk, RowKey: "r"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.s.SplitTableRange(ctx, acct, "Halves", 5, "m", 9); err != nil {
		t.Fatal(err)
	}
	if err := e.s.SplitGroupSpan(WithStamp(ctx, Stamp{Group: 5, Index: 11}), 5, 9, "m"); err != nil {
		t.Fatal(err)
	}

	for name, at := range map[string]string{"at the left range's start": "", "inside the right range": "n", "past it": "zz"} {
		if err := e.s.MergeTableRange(ctx, acct, "Halves", 5, at); !IsCode(err, CodeInvalidInput) {
			t.Errorf("a merge %s: %v, want InvalidInput", name, err)
		}
	}
	if err := e.s.MergeTableRange(ctx, acct, "Halves", 9, "m"); !IsCode(err, CodeInvalidInput) {
		t.Errorf("a merge of the last range: %v, want InvalidInput", err)
	}
	if err := e.s.SetGroupVoters(ctx, acct, "Halves", 9, []uint64{2}); err != nil {
		t.Fatal(err)
	}
	if err := e.s.MergeTableRange(ctx, acct, "Halves", 5, "m"); !IsCode(err, CodeInvalidInput) {
		t.Errorf("a merge of ranges named on different nodes: %v, want InvalidInput", err)
	}
	if err := e.s.SetGroupVoters(ctx, acct, "Halves", 9, []uint64{1}); err != nil {
		t.Fatal(err)
	}
	if err := e.s.MergeTableRange(ctx, acct, "Halves", 5, "m"); err != nil {
		t.Fatal(err)
	}
	if rs, err := e.s.TableRanges(acct, "Halves"); err != nil || len(rs) != 1 || rs[0].Group.ID != 5 || rs[0].End != "" {
		t.Fatalf("the catalog after the merge: %+v, %v; want group 5 alone", rs, err)
	}
	if g, err := e.s.TableGroupFor(acct, "Halves", "z"); err != nil || g.ID != 5 {
		t.Fatalf("z is routed to group %d (%v), want 5", g.ID, err)
	}
	if _, holds, _ := e.s.GroupHolds(5, acct, "Halves", "z"); holds {
		t.Fatal("the left group holds the right range's keys before its log merged them")
	}
	if _, holds, _ := e.s.GroupHolds(9, acct, "Halves", "z"); !holds {
		t.Fatal("the right group stopped holding its keys before its log froze them")
	}
	out, err := e.s.OutsideCatalog()
	if err != nil || len(out) != 1 || out[0].Group != 9 || out[0].Frozen || out[0].Span.LowPartitionKey != "m" {
		t.Fatalf("OutsideCatalog = %+v, %v; want group 9, not frozen", out, err)
	}
	merge := WithStamp(ctx, Stamp{Group: 5, Index: 12})
	if err := e.s.MergeGroupSpan(merge, 5, 9, "m"); !errors.Is(err, ErrMergeUnready) {
		t.Fatalf("a merge of a group not frozen: %v, want ErrMergeUnready", err)
	}

	if err := e.s.FreezeGroupSpan(WithStamp(ctx, Stamp{Group: 9, Index: 20}), 9); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	if frozen, err := e.s.GroupFrozen(9); err != nil || !frozen {
		t.Fatalf("group 9 after its freeze and a reopen: frozen %v, %v", frozen, err)
	}
	if a, err := e.s.AppliedIndex(9); err != nil || a != 20 {
		t.Fatalf("group 9's applied index after its freeze: %d, %v; want 20", a, err)
	}
	if _, holds, _ := e.s.GroupHolds(9, acct, "Halves", "z"); holds {
		t.Fatal("a frozen span holds its keys")
	}
	if out, err := e.s.OutsideCatalog(); err != nil || len(out) != 1 || !out[0].Frozen {
		t.Fatalf("OutsideCatalog after the freeze = %+v, %v", out, err)
	}
	if err := e.s.MergeGroupSpan(merge, 5, 9, "n"); !IsCode(err, CodeInvalidInput) {
		t.Fatalf("a merge where the left span does not end: %v, want InvalidInput", err)
	}

	if err := e.s.MergeGroupSpan(merge, 5, 9, "m"); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	if sp, ok, err := e.s.GroupSpan(5); err != nil || !ok || sp != (Span{Account: acct, Table: "Halves"}) {
		t.Fatalf("the left span after the merge = %+v, %v, %v; want the whole table", sp, ok, err)
	}
	if _, ok, err := e.s.GroupSpan(9); ok || err != nil {
		t.Fatalf("the right group still has a span after the merge: %v, %v", ok, err)
	}
	if a, err := e.s.AppliedIndex(5); err != nil || a != 12 {
		t.Fatalf("the left group's applied index after the merge: %d, %v; want 12", a, err)
	}
	if a, err := e.s.AppliedIndex(9); err != nil || a != 0 {
		t.Fatalf("the right group's applied index after the merge: %d, %v; want none", a, err)
	}
	if out, err := e.s.OutsideCatalog(); err != nil || len(out) != 0 {
		t.Fatalf("OutsideCatalog after the merge = %+v, %v; want none", out, err)
	}
	for _, pk := range []string{"a", "m", "z"} {
		if _, holds, _ := e.s.GroupHolds(5, acct, "Halves", pk); !holds {
			t.Errorf("the merged group does not hold %q", pk)
		}
		if _, err := e.s.GetEntity(ctx, acct, "Halves", pk, "r"); err != nil {
			t.Errorf("entity %q after the merge: %v", pk, err)
		}
	}
}

// TestMergedGroupsRecorded follows the record of what a span merged: a
// merge adds the right group to the left's record, durably; a later
// split leaves it with the parent, not the child; a span snapshot of the
// parent carries it (format version 2) and its ingest records it on the
// follower, across a reopen and a move finished from the marker; a
// snapshot of a span that merged nothing is written as version 1, and
// its ingest clears the list; a merged group's own merges are not
// carried into the list of the group that merges it.
func TestMergedGroupsRecorded(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	e.createTableInGroup("Halves", 5)
	for _, pk := range []string{"a", "m", "z"} {
		mustApply(t, e.s, "Halves", Op{Kind: OpInsert, Entity: &odata.Entity{PartitionKey: pk, RowKey: "r"}})
	}
	split := func(parent, child uint64, at string, index uint64) {
		t.Helper()
		if err := e.s.SplitTableRange(ctx, acct, "Halves", parent, at, child); err != nil {
			t.Fatal(err)
		}
		if err := e.s.SplitGroupSpan(WithStamp(ctx, Stamp{Group: parent, Index: index}), parent, child, at); err != nil {
			t.Fatal(err)
		}
	}
	split(5, 9, "m", 11)
	if err := e.s.MergeTableRange(ctx, acct, "Halves", 5, "m"); err != nil {
		t.Fatal(err)
	}
	if err := e.s.FreezeGroupSpan(WithStamp(ctx, Stamp{Group: 9, Index: 20}), 9); err != nil {
		t.Fatal(err)
	}
	if got := mustMerged(t, e.s, 9); got != nil {
		t.Fatalf("a frozen group records %v merged, want none", got)
	}
	if err := e.s.MergeGroupSpan(WithStamp(ctx, Stamp{Group: 5, Index: 12}), 5, 9, "m"); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	if got := mustMerged(t, e.s, 5); !slices.Equal(got, []uint64{9}) {
		t.Fatalf("group 5 after merging group 9 and a reopen records %v merged, want [9]", got)
	}
	// A leader whose catalog lags proposes the split that made group 9
	// again: refused, as a service error every replica gives alike,
	// with nothing written.
	err := e.s.SplitGroupSpan(WithStamp(ctx, Stamp{Group: 5, Index: 13}), 5, 9, "m")
	if ErrorCode(err) != CodeInvalidInput {
		t.Fatalf("group 5 splitting off group 9, which it merged, again: %v, want %s", err, CodeInvalidInput)
	}
	if sp, ok, _ := e.s.GroupSpan(5); !ok || sp.HighPartitionKey != "" {
		t.Fatalf("group 5's span after the refused split: %+v, want it whole", sp)
	}
	if mustRecorded(t, e.s, 9) {
		t.Fatal("the refused split recorded group 9's span")
	}
	split(5, 14, "m", 13)
	if got := mustMerged(t, e.s, 5); !slices.Equal(got, []uint64{9}) {
		t.Fatalf("group 5 after a split records %v merged, want [9] still", got)
	}
	if got := mustMerged(t, e.s, 14); got != nil {
		t.Fatalf("the split's child records %v merged, want none", got)
	}

	stream := func(group uint64, sp Span) []byte {
		t.Helper()
		ss, err := e.s.SnapshotSpan(group, sp)
		if err != nil {
			t.Fatal(err)
		}
		defer ss.Close()
		var buf bytes.Buffer
		if _, err := ss.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	left := Span{Account: acct, Table: "Halves", HighPartitionKey: "m"}
	right := Span{Account: acct, Table: "Halves", LowPartitionKey: "m"}
	fromLeft, fromRight := stream(5, left), stream(14, right)
	if !bytes.HasPrefix(fromLeft, spanSnapshotMergedMagic) || !bytes.HasPrefix(fromRight, spanSnapshotMagic) {
		t.Fatalf("the streams open with %q and %q; want version 2 for the span that merged, 1 for the other", fromLeft[:8], fromRight[:8])
	}

	f := newEnv(t, nil)
	f.createTableInGroup("Halves", 5)
	if _, err := f.s.IngestSpan(5, left, bytes.NewReader(fromLeft)); err != nil {
		t.Fatal(err)
	}
	f.reopen()
	if got := mustMerged(t, f.s, 5); !slices.Equal(got, []uint64{9}) {
		t.Fatalf("the follower after the ingest and a reopen records %v merged, want [9]", got)
	}
	if _, err := f.s.IngestSpan(5, left, bytes.NewReader(EmptySpanStream(5, left))); err != nil {
		t.Fatal(err)
	}
	if got := mustMerged(t, f.s, 5); got != nil {
		t.Fatalf("the follower after a snapshot of a span that merged nothing records %v merged, want none", got)
	}

	// A move finished from its marker after a crash records the list too.
	tb, err := f.s.lookupTable(acct, "Halves")
	if err != nil {
		t.Fatal(err)
	}
	m := spanIngest{group: 5, tableID: tb.id, account: acct, high: "m"}
	if m.applied, m.merged, err = f.s.stageSpan(5, left, bytes.NewReader(fromLeft)); err != nil {
		t.Fatal(err)
	}
	if back, err := decodeSpanIngest(5, m.encode()); err != nil || !reflect.DeepEqual(back, m) {
		t.Fatalf("the marker %+v reads back as %+v, %v", m, back, err)
	}
	if err := f.s.db.Set(groupMetaKey(metaSpanIngest, 5), m.encode(), f.s.syncWO); err != nil {
		t.Fatal(err)
	}
	f.reopen()
	if got := mustMerged(t, f.s, 5); !slices.Equal(got, []uint64{9}) {
		t.Fatalf("the follower after a move finished at Open records %v merged, want [9]", got)
	}

	// A group records the merges of its own log only: merging group 14,
	// which merged group 20, group 5 records 14, not 20 (a replica of 14
	// that lags its merge of 20 still has it to make).
	merge := func(left, right uint64, at string, index uint64) {
		t.Helper()
		if err := e.s.MergeTableRange(ctx, acct, "Halves", left, at); err != nil {
			t.Fatal(err)
		}
		if err := e.s.FreezeGroupSpan(WithStamp(ctx, Stamp{Group: right, Index: index}), right); err != nil {
			t.Fatal(err)
		}
		if err := e.s.MergeGroupSpan(WithStamp(ctx, Stamp{Group: left, Index: index + 1}), left, right, at); err != nil {
			t.Fatal(err)
		}
	}
	split(14, 20, "t", 30)
	merge(14, 20, "t", 31)
	if got := mustMerged(t, e.s, 14); !slices.Equal(got, []uint64{20}) {
		t.Fatalf("group 14 after merging group 20 records %v merged, want [20]", got)
	}
	merge(5, 14, "m", 33)
	if got := mustMerged(t, e.s, 5); !slices.Equal(got, []uint64{9, 14}) {
		t.Fatalf("group 5 after merging group 14 records %v merged, want [9 14]", got)
	}
}

// TestSpanHolders: the groups whose span record lies over any part of a
// span, of the same table, are listed by id with their spans, the
// group's own and a neighbour's that only touches the span are not, nor
// another table's; a table whose first group has no record lists that
// group as holding the whole table.
func TestSpanHolders(t *testing.T) {
	e := newEnv(t, nil)
	e.createTable("alpha")
	e.createTable("beta")
	record := func(group uint64, table, lo, hi string) {
		t.Helper()
		sp := Span{Account: acct, Table: table, LowPartitionKey: lo, HighPartitionKey: hi}
		if err := e.s.EmptySpan(group, sp); err != nil {
			t.Fatal(err)
		}
	}
	record(7, "alpha", "k", "p")
	record(9, "alpha", "p", "")
	record(8, "beta", "", "")
	record(5, "alpha", "a", "k")
	holders := func(group uint64, table, lo, hi string) string {
		t.Helper()
		hs, err := e.s.SpanHolders(group, Span{Account: acct, Table: table, LowPartitionKey: lo, HighPartitionKey: hi})
		if err != nil {
			t.Fatal(err)
		}
		out := ""
		for _, h := range hs {
			out += fmt.Sprintf("%d[%s,%s) ", h.Group, h.Span.LowPartitionKey, h.Span.HighPartitionKey)
		}
		return out
	}
	for _, c := range []struct{ lo, hi, want string }{
		{"k", "p", ""},            // its own span only: 5 ends at k, 9 starts at p
		{"m", "q", "9[p,) "},      // into 9's
		{"b", "l", "5[a,k) "},     // across 5's end into its own
		{"", "a", ""},             // below everything
		{"", "", "5[a,k) 9[p,) "}, // the whole table
		{"x", "", "9[p,) "},       // the table's end
		{"kz", "l", ""},           // inside its own
	} {
		if got := holders(7, "ALPHA", c.lo, c.hi); got != c.want {
			t.Errorf("span [%q, %q): %q; want %q", c.lo, c.hi, got, c.want)
		}
	}
	if got := holders(7, "gone", "", ""); got != "" {
		t.Errorf("a table that does not exist: %q", got)
	}
	// A table split into range groups whose first group has no record:
	// that group holds the whole table.
	e.createTableInGroup("gamma", 20)
	record(21, "gamma", "m", "")
	if got := holders(21, "gamma", "m", ""); got != "20[,) " {
		t.Errorf("a first group with no record: %q; want it over the whole table", got)
	}
	if got := holders(20, "gamma", "", ""); got != "21[m,) " {
		t.Errorf("the first group's own holders: %q", got)
	}
}

// TestForgetGroups forgets two groups' records in one write: their spans
// and applied indexes are gone, across a reopen, and a third group's
// are kept, as are every entity.
func TestForgetGroups(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	e.createTableInGroup("Halves", 5)
	e.createTableInGroup("Other", 7)
	for _, w := range []struct {
		table string
		group uint64
		pk    string
	}{{"Halves", 5, "a"}, {"Halves", 5, "z"}, {"Other", 7, "a"}} {
		sctx := WithStamp(ctx, Stamp{Group: w.group, Index: 10, Timestamp: odata.DateTime(1000)})
		if _, err := e.s.Apply(sctx, acct, w.table, Op{Kind: OpInsert, Entity: &odata.Entity{PartitionKey: w.pk, RowKey: "r"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.s.SplitTableRange(ctx, acct, "Halves", 5, "m", 9); err != nil {
		t.Fatal(err)
	}
	if err := e.s.SplitGroupSpan(WithStamp(ctx, Stamp{Group: 5, Index: 11}), 5, 9, "m"); err != nil {
		t.Fatal(err)
	}
	if !mustRecorded(t, e.s, 5) || !mustRecorded(t, e.s, 9) {
		t.Fatal("the split recorded no spans")
	}
	if err := e.s.ForgetGroups([]uint64{5, 9}); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	for _, g := range []uint64{5, 9} {
		if mustRecorded(t, e.s, g) {
			t.Errorf("group %d's span is still recorded", g)
		}
		if a, err := e.s.AppliedIndex(g); err != nil || a != 0 {
			t.Errorf("group %d's applied index = %d, %v; want none", g, a, err)
		}
	}
	if a, err := e.s.AppliedIndex(7); err != nil || a != 10 {
		t.Errorf("group 7's applied index = %d, %v; want 10", a, err)
	}
	for _, w := range [][2]string{{"Halves", "a"}, {"Halves", "z"}, {"Other", "a"}} {
		if _, err := e.s.GetEntity(ctx, acct, w[0], w[1], "r"); err != nil {
			t.Errorf("entity %s/%s: %v", w[0], w[1], err)
		}
	}
	if err := e.s.ForgetGroups(nil); err != nil {
		t.Errorf("forgetting no group: %v", err)
	}
}
