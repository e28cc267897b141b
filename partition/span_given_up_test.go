package partition

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"
)

func TestSpanMinus(t *testing.T) {
	span := func(lo, hi string) Span { return Span{LowPartitionKey: lo, HighPartitionKey: hi} }
	for _, c := range []struct {
		spans []Span
		cut   Span
		want  string
	}{
		{[]Span{span("", "")}, span("m", ""), `[[ m)]`},
		{[]Span{span("", "")}, span("", "m"), `[[m )]`},
		{[]Span{span("", "")}, span("c", "m"), `[[ c) [m )]`},
		{[]Span{span("c", "m")}, span("", ""), `[]`},
		{[]Span{span("c", "m")}, span("a", "c"), `[[c m)]`},
		{[]Span{span("c", "m")}, span("m", "z"), `[[c m)]`},
		{[]Span{span("c", "m")}, span("a", "d"), `[[d m)]`},
		{[]Span{span("c", "m")}, span("l", ""), `[[c l)]`},
		{[]Span{span("a", "c"), span("m", "")}, span("b", "n"), `[[a b) [n )]`},
	} {
		var got []string
		for _, sp := range SpanMinus(c.spans, c.cut) {
			got = append(got, fmt.Sprintf("[%s %s)", sp.LowPartitionKey, sp.HighPartitionKey))
		}
		if s := fmt.Sprint(got); s != c.want {
			t.Errorf("%v minus %v = %s, want %s", c.spans, c.cut, s, c.want)
		}
	}
}

// TestSpanIngestDropsWhatTheGroupGivesUp: a group whose snapshot brings
// it a smaller span than the one it holds (a replica that lagged past a
// split) loses the keys of the part it gives up, unless another group of
// the store holds them; the rest of the store is untouched and the range
// statistics stay exact.
func TestSpanIngestDropsWhatTheGroupGivesUp(t *testing.T) {
	ctx := context.Background()
	src := newSpanSource(t, 6)
	dst := newSpanTarget(t, nil, 6)
	before := viewOf(t, dst.s)
	ingest := func(group uint64, sp Span) {
		t.Helper()
		if _, err := dst.s.IngestSpan(group, sp, bytes.NewReader(spanStream(t, src.s, group, sp))); err != nil {
			t.Fatal(err)
		}
	}
	ingest(spanGroup, Span{Account: acct, Table: spanTable})
	// Another group holds the table from p08 on; spanGroup, shrinking
	// to [p03, p07), gives up [, p03) and [p07, p08) only.
	const other = spanGroup + 2
	ingest(other, Span{Account: acct, Table: spanTable, LowPartitionKey: "p08"})
	ingest(spanGroup, testSpan)
	kept := func(pk string) bool { return testSpan.Contains(pk) || pk >= "p08" }
	want := fmtEntities(allEntities(t, src.s, acct, spanTable), kept)
	check := func(when string) {
		t.Helper()
		if got := fmtEntities(allEntities(t, dst.s, acct, spanTable), everything); got != want {
			t.Fatalf("%s: the table holds\n%s---\nwant\n%s", when, got, want)
		}
		if viewOf(t, dst.s).others != before.others {
			t.Fatalf("%s: other tables changed", when)
		}
		if err := checkPLRanges(ctx, dst.s); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
	}
	check("after the shrinking ingest")
	dst.reopen()
	check("after a reopen")

	// Growing back takes nothing from the other group.
	ingest(spanGroup, Span{Account: acct, Table: spanTable, HighPartitionKey: "p08"})
	want = fmtEntities(allEntities(t, src.s, acct, spanTable), everything)
	check("after growing back")
}

// TestSpanIngestGivesUpToTheFirstGroupOnly: without span records, a
// table's first group holds the whole table (it may not have applied a
// split yet, and will start its child from the keys past it), and a
// group the catalog names past a split holds nothing here (it empties its
// span before it starts). So a group shrinking its span keeps the keys it
// gives up while the first group has no record, and a first group that
// shrinks its own span deletes them.
func TestSpanIngestGivesUpToTheFirstGroupOnly(t *testing.T) {
	ctx := context.Background()
	setUp := func() *testEnv {
		e := newEnv(t, nil)
		e.createTableInGroup("Halves", 5)
		for _, pk := range []string{"a", "k", "m", "z"} {
			mustApply(t, e.s, "Halves", Op{Kind: OpInsert, Entity: ent(pk, "r")})
		}
		if err := e.s.SplitTableRange(ctx, acct, "Halves", 5, "m", 9); err != nil {
			t.Fatal(err)
		}
		return e
	}
	whole := Span{Account: acct, Table: "Halves"}
	low := Span{Account: acct, Table: "Halves", HighPartitionKey: "m"}
	ingest := func(e *testEnv, group uint64, sp Span) {
		t.Helper()
		if _, err := e.s.IngestSpan(group, sp, bytes.NewReader(spanStream(t, e.s, group, sp))); err != nil {
			t.Fatal(err)
		}
	}
	holds := func(e *testEnv, want string) {
		t.Helper()
		var got []string
		for _, se := range allEntities(t, e.s, acct, "Halves") {
			got = append(got, se.PartitionKey)
		}
		if fmt.Sprint(got) != want {
			t.Fatalf("the table holds %v; want %s", got, want)
		}
		if err := checkPLRanges(ctx, e.s); err != nil {
			t.Fatal(err)
		}
	}

	e := setUp()
	ingest(e, 7, whole)
	ingest(e, 7, low)
	holds(e, "[a k m z]")

	e = setUp()
	ingest(e, 5, low)
	holds(e, "[a k]")
}

// TestSpanIngestRollForwardGivesUp: an ingest that shrinks a group's span,
// cut by a crash after its marker, is finished at Open and then drops the
// part the group gives up, as the ingest would have: Open must know the
// span records (the group's old span, and the other group's) before it
// redoes the move.
func TestSpanIngestRollForwardGivesUp(t *testing.T) {
	src := newSpanSource(t, 6)
	dst := newSpanTarget(t, nil, 6)
	ingest := func(group uint64, sp Span) {
		t.Helper()
		if _, err := dst.s.IngestSpan(group, sp, bytes.NewReader(spanStream(t, src.s, group, sp))); err != nil {
			t.Fatal(err)
		}
	}
	ingest(spanGroup, Span{Account: acct, Table: spanTable})
	ingest(spanGroup+2, Span{Account: acct, Table: spanTable, LowPartitionKey: "p08"})

	// The shrinking ingest, staged and marked, then the crash.
	stageMarked(t, dst.s, spanStream(t, src.s, spanGroup, testSpan))
	crashed := dst.crashClone()
	crashed.open()
	defer crashed.s.Close()

	kept := func(pk string) bool { return testSpan.Contains(pk) || pk >= "p08" }
	want := fmtEntities(allEntities(t, src.s, acct, spanTable), kept)
	if got := fmtEntities(allEntities(t, crashed.s, acct, spanTable), everything); got != want {
		t.Fatalf("after the roll forward, the table holds\n%s---\nwant\n%s", got, want)
	}
	crashed.s.maintain(time.Second) // the recount a roll forward asks for
	if err := checkPLRanges(context.Background(), crashed.s); err != nil {
		t.Fatal(err)
	}
}
