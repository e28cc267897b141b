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
	good := encodeCatalogValue(9, RangeGroup{ID: 5, Voters: []uint64{1, 2}}, "Tbl")
	if id, g, name, err := decodeCatalogValue(good); err != nil || id != 9 || g.ID != 5 || len(g.Voters) != 2 || name != "Tbl" {
		t.Fatalf("round trip: %d %+v %q %v", id, g, name, err)
	}
	head := good[:1+idLen]
	for name, v := range map[string][]byte{
		"no group":        head,
		"group id zero":   append(append([]byte{}, head...), 0, 1, 1),
		"no voters":       append(append([]byte{}, head...), 5, 0),
		"too many voters": append(append([]byte{}, head...), 5, MaxGroupVoters+1, 1, 2, 3, 4, 5, 6, 7, 8),
		"voter zero":      append(append([]byte{}, head...), 5, 1, 0),
		"truncated voter": append(append([]byte{}, head...), 5, 2, 1, 0x80),
		"version 3":       append([]byte{3}, good[1:]...),
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
	if tg, ok := e.s.GroupTable(12); !ok || tg.Table != "Moved" || !reflect.DeepEqual(tg.Group.Voters, []uint64{1, 2, 3}) {
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
	if tg, ok := e.s.GroupTable(12); !ok || !reflect.DeepEqual(tg.Group, want) {
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
	if _, ok := e.s.GroupTable(12); ok {
		t.Fatal("GroupTable finds a dropped table")
	}
	if err := e.s.SetGroupVoters(ctx, acct, "Moved", 12, []uint64{1}); !IsCode(err, CodeTableNotFound) {
		t.Fatalf("a move of a dropped table's group: %v", err)
	}
}
