package partition

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tabuladb/tabula/odata"
)

// fillQueryTable makes partitions p0..p9 with rows r00..r19; N = 10p+r.
func fillQueryTable(t *testing.T, s *Store) {
	t.Helper()
	for p := range 10 {
		ops := make([]Op, 20)
		for r := range ops {
			ops[r] = Op{Kind: OpInsert, Entity: ent(fmt.Sprint("p", p), fmt.Sprintf("r%02d", r), "N", p*100+r, "Even", r%2 == 0)}
		}
		if _, err := s.ExecuteBatch(context.Background(), acct, "qry", ops); err != nil {
			t.Fatal(err)
		}
	}
}

// walk runs a query to its end, page by page, and returns the keys.
func walk(t *testing.T, s *Store, q EntityQuery) (keys []string, pages int) {
	t.Helper()
	for {
		page, c, err := s.QueryEntitiesPage(context.Background(), acct, "qry", q)
		if err != nil {
			t.Fatalf("query %+v: %v", q, err)
		}
		pages++
		if q.Top > 0 && len(page) > q.Top {
			t.Fatalf("page of %d > top %d", len(page), q.Top)
		}
		for _, e := range page {
			keys = append(keys, e.PartitionKey+"/"+e.RowKey)
		}
		if c.IsZero() {
			return keys, pages
		}
		if pages > 10000 {
			t.Fatal("query does not end")
		}
		q.NextPartitionKey, q.NextRowKey = c.NextPartitionKey, c.NextRowKey
	}
}

func TestQueryFilters(t *testing.T) {
	e := newEnv(t, nil)
	e.createTable("qry")
	s := e.s
	fillQueryTable(t, s)
	expect := func(pred func(p, r int) bool) []string {
		var out []string
		for p := range 10 {
			for r := range 20 {
				if pred(p, r) {
					out = append(out, fmt.Sprintf("p%d/r%02d", p, r))
				}
			}
		}
		return out
	}
	for _, c := range []struct {
		filter string
		want   func(p, r int) bool
	}{
		{"", func(p, r int) bool { return true }},
		{"PartitionKey eq 'p3'", func(p, r int) bool { return p == 3 }},
		{"PartitionKey eq 'p3' and RowKey eq 'r07'", func(p, r int) bool { return p == 3 && r == 7 }},
		{"PartitionKey eq 'p3' and (RowKey eq 'r07' or RowKey eq 'r02' or RowKey eq 'x')", func(p, r int) bool { return p == 3 && (r == 7 || r == 2) }},
		{"PartitionKey eq 'p1' or PartitionKey eq 'p8'", func(p, r int) bool { return p == 1 || p == 8 }},
		{"PartitionKey ge 'p2' and PartitionKey lt 'p5' and Even", func(p, r int) bool { return p >= 2 && p < 5 && r%2 == 0 }},
		{"PartitionKey gt 'p7' and RowKey ge 'r15'", func(p, r int) bool { return p > 7 && r >= 15 }},
		{"N ge 505 and N lt 510", func(p, r int) bool { return p == 5 && r >= 5 && r < 10 }},
		{"not (PartitionKey lt 'p9')", func(p, r int) bool { return p == 9 }},
		{"PartitionKey eq 'p1' and PartitionKey eq 'p2'", func(p, r int) bool { return false }},
		{"N eq 1L", func(p, r int) bool { return false }}, // Int64 literal vs Int32 property
	} {
		want := expect(c.want)
		for _, top := range []int{0, 1, 7, 1000} {
			got, pages := walk(t, s, EntityQuery{Filter: c.filter, Top: top})
			if !slices.Equal(got, want) {
				t.Fatalf("%q top %d: got %d entities %v, want %d", c.filter, top, len(got), got, len(want))
			}
			if top == 7 && len(want) > 7 && pages < len(want)/7 {
				t.Fatalf("%q top 7: %d pages for %d entities", c.filter, pages, len(want))
			}
		}
	}
	_, _, err := s.QueryEntitiesPage(context.Background(), acct, "qry", EntityQuery{Filter: "N eq"})
	wantCode(t, "bad filter", err, CodeInvalidInput)
	_, _, err = s.QueryEntitiesPage(context.Background(), acct, "qry", EntityQuery{Top: -1})
	wantCode(t, "negative top", err, CodeInvalidInput)
}

func TestQueryContinuationTokens(t *testing.T) {
	e := newEnv(t, nil)
	e.createTable("qry")
	s := e.s
	ctx := context.Background()
	fillQueryTable(t, s)
	page, c, err := s.QueryEntitiesPage(ctx, acct, "qry", EntityQuery{Top: 25})
	if err != nil || len(page) != 25 || c.IsZero() {
		t.Fatalf("first page: %d, %+v, %v", len(page), c, err)
	}
	if pk, rk, err := c.Position(); err != nil || pk != "p1" || rk != "r05" {
		t.Fatalf("continuation names (%q, %q), %v; want the next entity (p1, r05)", pk, rk, err)
	}
	other := NewContinuation("p2", "r05")
	for _, bad := range []Continuation{
		{"garbage", c.NextRowKey},
		{c.NextPartitionKey, "garbage"},
		{c.NextPartitionKey, other.NextRowKey}, // mismatched pair
		{other.NextPartitionKey, c.NextRowKey},
		{"", c.NextRowKey},
		{c.NextPartitionKey[:len(c.NextPartitionKey)-1], c.NextRowKey},
		{c.NextPartitionKey + "A", c.NextRowKey},
		{c.NextPartitionKey, c.NextRowKey + "\n"},
		{EncodeNextTableName("p1"), c.NextRowKey}, // a token of another kind
	} {
		_, _, err := s.QueryEntitiesPage(ctx, acct, "qry", EntityQuery{NextPartitionKey: bad.NextPartitionKey, NextRowKey: bad.NextRowKey})
		wantCode(t, fmt.Sprintf("token %+v", bad), err, CodeInvalidInput)
	}
	// A NextPartitionKey alone resumes at the start of the partition.
	page, _, err = s.QueryEntitiesPage(ctx, acct, "qry", EntityQuery{Top: 1, NextPartitionKey: NewContinuation("p4", "").NextPartitionKey})
	if err != nil || len(page) != 1 || page[0].PartitionKey != "p4" || page[0].RowKey != "r00" {
		t.Fatalf("partition token: %+v %v", page, err)
	}
	// A continuation past the last range ends the query.
	past := NewContinuation("p3", "zzz")
	page, c, err = s.QueryEntitiesPage(ctx, acct, "qry", EntityQuery{Filter: "PartitionKey eq 'p3'", NextPartitionKey: past.NextPartitionKey, NextRowKey: past.NextRowKey})
	if err != nil || len(page) != 0 || !c.IsZero() {
		t.Fatalf("past the end: %d %+v %v", len(page), c, err)
	}
	// The last page carries no continuation, even when exactly full.
	page, c, err = s.QueryEntitiesPage(ctx, acct, "qry", EntityQuery{Filter: "PartitionKey eq 'p9'", Top: 20})
	if err != nil || len(page) != 20 || !c.IsZero() {
		t.Fatalf("exactly full last page: %d %+v %v", len(page), c, err)
	}
	// fn's error stops the page.
	boom := errors.New("boom")
	_, err = s.QueryEntities(ctx, acct, "qry", EntityQuery{}, func(*StoredEntity) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("fn error: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = s.QueryEntities(cctx, acct, "qry", EntityQuery{}, func(*StoredEntity) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
}

// A page stops on its time budget, possibly empty but with a continuation
// that makes progress, and walking the pages still finds everything.
func TestQueryTimeBudget(t *testing.T) {
	e := newEnv(t, &Options{Now: stepClock(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), time.Second), PageTimeout: time.Second / 2})
	e.createTable("qry")
	s := e.s
	fillQueryTable(t, s)
	// A selective filter: most pages end on the budget with nothing found.
	got, pages := walk(t, s, EntityQuery{Filter: "N eq 917 or N eq 3"})
	if !slices.Equal(got, []string{"p0/r03", "p9/r17"}) {
		t.Fatalf("got %v", got)
	}
	if pages < 200/timeCheckEvery {
		t.Fatalf("%d pages: the budget did not stop them", pages)
	}
	page, c, err := s.QueryEntitiesPage(context.Background(), acct, "qry", EntityQuery{Filter: "N eq 917"})
	if err != nil || len(page) != 0 || c.IsZero() {
		t.Fatalf("first page: %d %+v %v", len(page), c, err)
	}
	all, _ := walk(t, s, EntityQuery{Top: 5})
	if len(all) != 200 {
		t.Fatalf("walk found %d entities", len(all))
	}
}

func TestStoredEntityOfQuery(t *testing.T) {
	e := newEnv(t, nil)
	e.createTable("qry")
	s := e.s
	w := mustApply(t, s, "qry", Op{Kind: OpInsert, Entity: ent("a", "b", "X", "y")})
	n := 0
	_, err := s.QueryEntities(context.Background(), acct, "qry", EntityQuery{Filter: "X eq 'y'"}, func(se *StoredEntity) error {
		n++
		x, err := se.Entity()
		if err != nil || se.ETag() != w.ETag() || se.Timestamp != w.Timestamp || x.PartitionKey != "a" || x.RowKey != "b" {
			t.Fatalf("%+v %+v %v", se, x, err)
		}
		if v, _ := x.Get("X"); !v.Identical(odata.StringValue("y")) {
			t.Fatalf("X = %v", v)
		}
		return nil
	})
	if err != nil || n != 1 {
		t.Fatal(n, err)
	}
}

// TestQueryScope checks that a query confined to a key range (a SAS's
// spk/srk/epk/erk) sees exactly the entities inside it, whatever the filter
// and however it pages.
func TestQueryScope(t *testing.T) {
	e := newEnv(t, nil)
	e.createTable("qry")
	fillQueryTable(t, e.s)
	scope := odata.KeyRange{
		Start: odata.Position{Kind: odata.BeforeKey, PartitionKey: "p3", RowKey: "r15"},
		End:   odata.Position{Kind: odata.AfterKey, PartitionKey: "p5", RowKey: "r02"},
	}
	inScope := func(p, r int) bool { return (p == 3 && r >= 15) || p == 4 || (p == 5 && r <= 2) }
	for _, c := range []struct {
		filter string
		want   func(p, r int) bool
	}{
		{"", inScope},
		{"Even eq true", func(p, r int) bool { return inScope(p, r) && r%2 == 0 }},
		{"PartitionKey eq 'p5'", func(p, r int) bool { return inScope(p, r) && p == 5 }},
		{"PartitionKey eq 'p5' and RowKey eq 'r02'", func(p, r int) bool { return p == 5 && r == 2 }},
		{"PartitionKey eq 'p5' and RowKey eq 'r03'", func(p, r int) bool { return false }},
		{"PartitionKey lt 'p3' or PartitionKey gt 'p5'", func(p, r int) bool { return false }},
	} {
		var want []string
		for p := range 10 {
			for r := range 20 {
				if c.want(p, r) {
					want = append(want, fmt.Sprintf("p%d/r%02d", p, r))
				}
			}
		}
		for _, top := range []int{0, 3} {
			got, _ := walk(t, e.s, EntityQuery{Filter: c.filter, Top: top, Scope: scope})
			if !slices.Equal(got, want) {
				t.Errorf("filter %q top %d: got %v, want %v", c.filter, top, got, want)
			}
		}
	}
	// A scoped query leaves later unscoped ones alone.
	if got, _ := walk(t, e.s, EntityQuery{Filter: "Even eq true"}); len(got) != 100 {
		t.Fatalf("unscoped query after scoped ones: %d entities, want 100", len(got))
	}
}
