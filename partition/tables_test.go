package partition

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestTableNames(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		code string
	}{
		{"abc", ""},                   // 3: shortest
		{"ab", CodeOutOfRangeInput},   // 2
		{"a", CodeOutOfRangeInput},    // 1
		{"", CodeInvalidResourceName}, // empty
		{strings.Repeat("x", 63), ""}, // longest
		{strings.Repeat("y", 64), CodeOutOfRangeInput},
		{"A1b2C3", ""},
		{"1abc", CodeInvalidResourceName}, // starts with a digit
		{"ab-c", CodeInvalidResourceName}, // punctuation
		{"ab_c", CodeInvalidResourceName},
		{"abc d", CodeInvalidResourceName},
		{"tablé", CodeInvalidResourceName},  // non-ASCII
		{"tables", CodeInvalidResourceName}, // reserved
		{"Tables", CodeInvalidResourceName},
		{"tables1", ""},
	} {
		_, err := e.s.CreateTable(ctx, acct, c.name)
		wantCode(t, fmt.Sprintf("create %q", c.name), err, c.code)
	}
}

func TestTableLifecycle(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	s := e.s
	tb, err := s.CreateTable(ctx, acct, "MyTable")
	if err != nil || tb.Name != "MyTable" {
		t.Fatalf("create: %v %v", tb, err)
	}
	_, err = s.CreateTable(ctx, acct, "mytable")
	wantCode(t, "create again (other case)", err, CodeTableAlreadyExists)
	// Another account has its own namespace.
	if _, err := s.CreateTable(ctx, "other", "mytable"); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetTable(ctx, acct, "MYTABLE")
	if err != nil || got.Name != "MyTable" {
		t.Fatalf("get: %v %v", got, err)
	}
	_, err = s.GetTable(ctx, acct, "nothere")
	wantCode(t, "get missing", err, CodeTableNotFound)
	wantCode(t, "delete missing", s.DeleteTable(ctx, acct, "nothere"), CodeTableNotFound)
	_, err = s.InsertEntity(ctx, acct, "nothere", ent("p", "r"))
	wantCode(t, "insert into missing", err, CodeTableNotFound)
	_, _, err = s.QueryEntitiesPage(ctx, acct, "nothere", EntityQuery{})
	wantCode(t, "query missing", err, CodeTableNotFound)
	_, err = s.GetEntity(ctx, acct, "nothere", "p", "r")
	wantCode(t, "get entity in missing", err, CodeTableNotFound)

	e.reopen()
	s = e.s
	got, err = s.GetTable(ctx, acct, "mytable")
	if err != nil || got.Name != "MyTable" {
		t.Fatalf("get after reopen: %v %v", got, err)
	}
	wantCode(t, "delete", s.DeleteTable(ctx, acct, "MYTABLE"), "")
	_, err = s.GetTable(ctx, acct, "mytable")
	wantCode(t, "get deleted", err, CodeTableNotFound)
	if _, err := s.GetTable(ctx, "other", "mytable"); err != nil {
		t.Fatalf("other account's table: %v", err)
	}
	e.reopen()
	_, err = e.s.GetTable(ctx, acct, "mytable")
	wantCode(t, "get deleted after reopen", err, CodeTableNotFound)
}

// A table dropped and re-created at once shows nothing of its old data, and
// after the background compaction the old keys are physically gone.
func TestDeleteTableDropsData(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	s := e.s
	e.createTable("drop")
	old, _ := s.lookupTable(acct, "drop")
	ops := make([]Op, 100)
	for p := range 5 {
		for i := range ops {
			ops[i] = Op{Kind: OpInsert, Entity: ent(fmt.Sprint("p", p), fmt.Sprintf("r%03d", i), "V", strings.Repeat("v", 100))}
		}
		if _, err := s.ExecuteBatch(ctx, acct, "drop", ops); err != nil {
			t.Fatal(err)
		}
	}
	// Some of the data in sstables, some in the memtable.
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, "drop", Op{Kind: OpInsert, Entity: ent("p9", "r")})
	if err := s.SetTableACL(ctx, acct, "drop", []SignedIdentifier{{ID: "x", Permission: "r"}}); err != nil {
		t.Fatal(err)
	}
	lo, hi := old.bounds("", "")
	if n := rawKeys(t, s.db, lo, hi); n != 501 {
		t.Fatalf("%d keys before drop, want 501", n)
	}

	if err := s.DeleteTable(ctx, acct, "drop"); err != nil {
		t.Fatal(err)
	}
	e.createTable("Drop")
	page, c, err := s.QueryEntitiesPage(ctx, acct, "drop", EntityQuery{})
	if err != nil || len(page) != 0 || !c.IsZero() {
		t.Fatalf("re-created table: %d entities, %v, %v", len(page), c, err)
	}
	_, err = s.GetEntity(ctx, acct, "drop", "p1", "r001")
	wantCode(t, "old entity in new table", err, CodeResourceNotFound)
	if ids, err := s.GetTableACL(ctx, acct, "drop"); err != nil || len(ids) != 0 {
		t.Fatalf("re-created table has ACL %v, %v", ids, err)
	}
	ranges, _ := s.Ranges(ctx, acct, "drop")
	if len(ranges) != 1 || ranges[0].Entities != 0 {
		t.Fatalf("re-created table ranges %+v", ranges)
	}

	s.waitDrops()
	if n := rawKeys(t, s.db, lo, hi); n != 0 {
		t.Fatalf("%d keys of the dropped table left after compaction", n)
	}
	// The drop is recorded as compacted, so a restart does not redo it.
	e.reopen()
	e.s.dropMu.Lock()
	pending := e.s.dropPending
	e.s.dropMu.Unlock()
	if pending != 0 {
		t.Fatalf("%d drops pending after reopen", pending)
	}
	if !e.s.isDeleted(old.id) {
		t.Fatal("dropped id forgotten after reopen")
	}
}

func TestQueryTables(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	s := e.s
	var names []string
	for i := range 25 {
		n := fmt.Sprintf("T%02dtab", i)
		if i%2 == 1 {
			n = strings.ToLower(n)
		}
		names = append(names, n)
		e.createTable(n)
	}
	e.createTable("zzzOther")
	if _, err := s.CreateTable(ctx, "acct2", "notmine"); err != nil {
		t.Fatal(err)
	}
	all := func(q TableQuery) []string {
		t.Helper()
		var out []string
		for pages := 0; ; pages++ {
			p, err := s.QueryTables(ctx, acct, q)
			if err != nil {
				t.Fatal(err)
			}
			if q.Top > 0 && len(p.Tables) > q.Top {
				t.Fatalf("page of %d > top %d", len(p.Tables), q.Top)
			}
			for _, tb := range p.Tables {
				out = append(out, tb.Name)
			}
			if p.NextTableName == "" {
				return out
			}
			if pages > 100 {
				t.Fatal("no end")
			}
			q.NextTableName = p.NextTableName
		}
	}
	want := append(slices.Clone(names), "zzzOther")
	if got := all(TableQuery{}); !slices.Equal(got, want) {
		t.Fatalf("all tables: %v", got)
	}
	if got := all(TableQuery{Top: 4}); !slices.Equal(got, want) {
		t.Fatalf("all tables by 4: %v", got)
	}
	// Ordinal comparison on the name as created: upper case sorts first.
	if got := all(TableQuery{Filter: "TableName ge 'T' and TableName lt 'U'", Top: 3}); len(got) != 13 || got[0] != "T00tab" {
		t.Fatalf("filtered: %v", got)
	}
	if got := all(TableQuery{Filter: "TableName eq 't05tab'"}); !slices.Equal(got, []string{"t05tab"}) {
		t.Fatalf("eq: %v", got)
	}
	if got := all(TableQuery{Filter: "TableName eq 'T05tab'"}); len(got) != 0 {
		t.Fatalf("eq is case-sensitive: %v", got)
	}
	_, err := s.QueryTables(ctx, acct, TableQuery{Filter: "TableName eq"})
	wantCode(t, "bad filter", err, CodeInvalidInput)
	_, err = s.QueryTables(ctx, acct, TableQuery{NextTableName: "bogus"})
	wantCode(t, "bad token", err, CodeInvalidInput)
	_, err = s.QueryTables(ctx, acct, TableQuery{Top: -1})
	wantCode(t, "negative top", err, CodeInvalidInput)
	p, err := s.QueryTables(ctx, "nobody", TableQuery{})
	if err != nil || len(p.Tables) != 0 || p.NextTableName != "" {
		t.Fatalf("empty account: %+v %v", p, err)
	}
}

func TestAllTables(t *testing.T) {
	s := newEnv(t, nil).s
	ctx := context.Background()
	for _, at := range []TableRef{{"b", "Zeta"}, {"a", "beta"}, {"b", "alpha"}, {"a", "Alpha"}, {"a", "gone"}} {
		if _, err := s.CreateTable(ctx, at.Account, at.Name); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteTable(ctx, "a", "gone"); err != nil {
		t.Fatal(err)
	}
	got, err := s.AllTables()
	if err != nil {
		t.Fatal(err)
	}
	want := []TableRef{{"a", "Alpha"}, {"a", "beta"}, {"b", "alpha"}, {"b", "Zeta"}}
	if !slices.Equal(got, want) {
		t.Fatalf("AllTables = %v, want %v", got, want)
	}
}
