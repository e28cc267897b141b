package partition

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/tabuladb/tabula/lsm"
)

// TestTableGroupsPersist records range groups in the catalog: they are
// read back after a reopen, listed by group id, gone with their table,
// and a table without a group keeps the old catalog encoding.
func TestTableGroupsPersist(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, err := e.s.CreateTableInGroup(ctx, acct, "Second", RangeGroup{ID: 40, Voters: []uint64{2, 3, 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.CreateTableInGroup(ctx, acct, "First", RangeGroup{ID: 7, Voters: []uint64{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.CreateTable(ctx, acct, "Plain"); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	want := []TableGroup{
		{Account: acct, Table: "First", Group: RangeGroup{ID: 7, Voters: []uint64{1, 2, 3}}},
		{Account: acct, Table: "Second", Group: RangeGroup{ID: 40, Voters: []uint64{2, 3, 1}}},
	}
	if got := e.s.TableGroups(); !reflect.DeepEqual(got, want) {
		t.Fatalf("TableGroups after reopen = %+v, want %+v", got, want)
	}
	if g, err := e.s.TableGroup(acct, "second"); err != nil || g.ID != 40 || !g.Has(3) || g.Has(4) {
		t.Fatalf("TableGroup(second) = %+v, %v", g, err)
	}
	if g, err := e.s.TableGroup(acct, "plain"); err != nil || g.ID != 0 {
		t.Fatalf("TableGroup(plain) = %+v, %v; want no group", g, err)
	}
	if _, err := e.s.TableGroup(acct, "missing"); !IsCode(err, CodeTableNotFound) {
		t.Fatalf("TableGroup(missing): %v, want TableNotFound", err)
	}
	page, err := e.s.QueryTables(ctx, acct, TableQuery{})
	if err != nil || len(page.Tables) != 3 || page.Tables[0].Name != "First" {
		t.Fatalf("QueryTables = %+v, %v", page, err)
	}
	if err := e.s.DeleteTable(ctx, acct, "First"); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	if got := e.s.TableGroups(); len(got) != 1 || got[0].Group.ID != 40 {
		t.Fatalf("TableGroups after a drop = %+v", got)
	}
	if v, err := e.s.db.Get(catalogKey(acct, "plain")); err != nil || v[0] != catalogVersion {
		t.Fatalf("a table without a group is stored as catalog version %d (%v), want %d", v[0], err, catalogVersion)
	}
}

// TestCatalogValueRefusesBadGroups feeds the catalog decoder broken group
// descriptors: each is corruption, none panics.
func TestCatalogValueRefusesBadGroups(t *testing.T) {
	good := encodeCatalogValue(9, []RangeGroup{{ID: 5, Voters: []uint64{1, 2}}}, "Tbl")
	if id, gs, name, err := decodeCatalogValue(good); err != nil || id != 9 || len(gs) != 1 || gs[0].ID != 5 || len(gs[0].Voters) != 2 || name != "Tbl" {
		t.Fatalf("round trip: %d %+v %q %v", id, gs, name, err)
	}
	split := []RangeGroup{{ID: 5, Voters: []uint64{1, 2}}, {ID: 9, Voters: []uint64{3}, Start: "m"}, {ID: 12, Voters: []uint64{1}, Start: "t\x00"}}
	if id, gs, name, err := decodeCatalogValue(encodeCatalogValue(9, split, "Tbl")); err != nil || id != 9 || !reflect.DeepEqual(gs, split) || name != "Tbl" {
		t.Fatalf("round trip of a split table: %d %+v %q %v", id, gs, name, err)
	}
	splitHead := encodeCatalogValue(9, split, "")[:1+idLen]
	head := good[:1+idLen]
	for name, v := range map[string][]byte{
		"no group":        head,
		"group id zero":   append(append([]byte{}, head...), 0, 1, 1),
		"no voters":       append(append([]byte{}, head...), 5, 0),
		"too many voters": append(append([]byte{}, head...), 5, MaxGroupVoters+1, 1, 2, 3, 4, 5, 6, 7, 8),
		"voter zero":      append(append([]byte{}, head...), 5, 1, 0),
		"truncated voter": append(append([]byte{}, head...), 5, 2, 1, 0x80),
		"version 4":       append([]byte{4}, good[1:]...),
		"one range in v3": append(append([]byte{}, splitHead...), 1, 5, 1, 1, 0),
		"first start set": append(append([]byte{}, splitHead...), 2, 5, 1, 1, 1, 'a', 6, 1, 1, 1, 'b'),
		"starts reversed": append(append([]byte{}, splitHead...), 3, 5, 1, 1, 0, 6, 1, 1, 1, 'b', 7, 1, 1, 1, 'a'),
		"start past end":  append(append([]byte{}, splitHead...), 2, 5, 1, 1, 0, 6, 1, 1, 9, 'b'),
		"count past end":  append(append([]byte{}, splitHead...), 200),
	} {
		if _, _, _, err := decodeCatalogValue(v); !errors.Is(err, lsm.ErrCorruption) {
			t.Errorf("%s: %v, want corruption", name, err)
		}
	}
}

// TestSetGroupVoters moves a table's descriptor to other voters: it is
// found by group id, survives a reopen, is refused for another group or
// a dropped table and for voters that are not valid, and the group index
// forgets a dropped table.
func TestSetGroupVoters(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, err := e.s.CreateTableInGroup(ctx, acct, "Moved", RangeGroup{ID: 12, Voters: []uint64{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	if tg, ok := mustGroupTable(t, e.s, 12); !ok || tg.Table != "Moved" || !reflect.DeepEqual(tg.Group.Voters, []uint64{1, 2, 3}) {
		t.Fatalf("GroupTable(12) = %+v, %v", tg, ok)
	}
	if err := e.s.SetGroupVoters(ctx, acct, "moved", 12, []uint64{1, 2, 4}); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	want := RangeGroup{ID: 12, Voters: []uint64{1, 2, 4}}
	if g, err := e.s.TableGroup(acct, "Moved"); err != nil || !reflect.DeepEqual(g, want) {
		t.Fatalf("TableGroup after a move and a reopen = %+v, %v", g, err)
	}
	if tg, ok := mustGroupTable(t, e.s, 12); !ok || !reflect.DeepEqual(tg.Group, want) {
		t.Fatalf("GroupTable(12) after a reopen = %+v, %v", tg, ok)
	}
	for name, c := range map[string]struct {
		group  uint64
		voters []uint64
		code   string
	}{
		"another group": {13, []uint64{1}, CodeTableNotFound},
		"no voters":     {12, nil, CodeInvalidInput},
		"a node twice":  {12, []uint64{1, 1}, CodeInvalidInput},
		"node zero":     {12, []uint64{0, 1}, CodeInvalidInput},
		"eight voters":  {12, []uint64{1, 2, 3, 4, 5, 6, 7, 8}, CodeInvalidInput},
	} {
		if err := e.s.SetGroupVoters(ctx, acct, "Moved", c.group, c.voters); !IsCode(err, c.code) {
			t.Errorf("%s: %v, want %s", name, err, c.code)
		}
	}
	if g, _ := e.s.TableGroup(acct, "Moved"); !reflect.DeepEqual(g, want) {
		t.Fatalf("a refused move changed the descriptor: %+v", g)
	}
	if err := e.s.DeleteTable(ctx, acct, "Moved"); err != nil {
		t.Fatal(err)
	}
	if _, ok := mustGroupTable(t, e.s, 12); ok {
		t.Fatal("GroupTable finds a dropped table")
	}
	if err := e.s.SetGroupVoters(ctx, acct, "Moved", 12, []uint64{1}); !IsCode(err, CodeTableNotFound) {
		t.Fatalf("a move of a dropped table's group: %v", err)
	}
}

// TestSplitTableRange splits a table's range twice: the descriptors are
// found by PartitionKey and by group id with their ends, survive a
// reopen (as catalog version 3), refuse a split outside the range, at
// its start or to a group in use, and all go with the table.
func TestSplitTableRange(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, err := e.s.CreateTableInGroup(ctx, acct, "Split", RangeGroup{ID: 4, Voters: []uint64{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	if err := e.s.SplitTableRange(ctx, acct, "split", 4, "m", 9); err != nil {
		t.Fatal(err)
	}
	if err := e.s.SplitTableRange(ctx, acct, "split", 9, "t", 11); err != nil {
		t.Fatal(err)
	}
	if err := e.s.SetGroupVoters(ctx, acct, "split", 9, []uint64{2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	if v, err := e.s.db.Get(catalogKey(acct, "split")); err != nil || v[0] != catalogVersionRanges {
		t.Fatalf("a split table's catalog entry: version %d, %v", v[0], err)
	}
	for pk, want := range map[string]uint64{"": 4, "a": 4, "l\xff": 4, "m": 9, "m0": 9, "s": 9, "t": 11, "zzz": 11} {
		if g, err := e.s.TableGroupFor(acct, "Split", pk); err != nil || g.ID != want {
			t.Errorf("TableGroupFor(%q) = %+v, %v; want group %d", pk, g, err, want)
		}
	}
	want := []TableGroup{
		{Account: acct, Table: "Split", Group: RangeGroup{ID: 4, Voters: []uint64{1, 2, 3}}, End: "m"},
		{Account: acct, Table: "Split", Group: RangeGroup{ID: 9, Voters: []uint64{2, 3, 4}, Start: "m"}, End: "t"},
		{Account: acct, Table: "Split", Group: RangeGroup{ID: 11, Voters: []uint64{1, 2, 3}, Start: "t"}},
	}
	if got := e.s.TableGroups(); !reflect.DeepEqual(got, want) {
		t.Fatalf("TableGroups = %+v, want %+v", got, want)
	}
	for _, stopAfter := range []int{1, 2, len(want) + 1} {
		var walked []TableGroup
		err := e.s.EachTableGroup(func(tg TableGroup) bool {
			walked = append(walked, tg)
			return len(walked) < stopAfter
		})
		if n := min(stopAfter, len(want)); err != nil || !reflect.DeepEqual(walked, want[:n]) {
			t.Fatalf("EachTableGroup stopped after %d: %+v, %v; want %+v", stopAfter, walked, err, want[:n])
		}
	}
	if tg, ok := mustGroupTable(t, e.s, 9); !ok || !reflect.DeepEqual(tg, want[1]) || tg.Span() != (Span{Account: acct, Table: "Split", LowPartitionKey: "m", HighPartitionKey: "t"}) {
		t.Fatalf("GroupTable(9) = %+v, %v", tg, ok)
	}
	for name, c := range map[string]struct {
		group, child uint64
		at           string
		code         string
	}{
		"at the range's start": {9, 20, "m", CodeInvalidInput},
		"past the range":       {9, 20, "u", CodeInvalidInput},
		"below the range":      {9, 20, "a", CodeInvalidInput},
		"a group in use":       {4, 11, "c", CodeInvalidInput},
		"group zero":           {4, 0, "c", CodeInvalidInput},
		"another table's":      {40, 20, "c", CodeTableNotFound},
	} {
		if err := e.s.SplitTableRange(ctx, acct, "Split", c.group, c.at, c.child); !IsCode(err, c.code) {
			t.Errorf("%s: %v, want %s", name, err, c.code)
		}
	}
	if err := e.s.DeleteTable(ctx, acct, "Split"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint64{4, 9, 11} {
		if _, ok := mustGroupTable(t, e.s, id); ok {
			t.Fatalf("GroupTable(%d) finds a dropped table", id)
		}
	}
}
