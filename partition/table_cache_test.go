package partition

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/odata"
)

// openCount returns how many tables the store holds open, checking that
// its count is the open map's.
func openCount(t *testing.T, s *Store) int {
	t.Helper()
	s.catMu.Lock()
	defer s.catMu.Unlock()
	n := 0
	s.tables.Range(func(_, v any) bool {
		if refs := v.(*table).refs.Load(); refs < 0 {
			t.Errorf("an open table is marked closing (refs %d)", refs)
		}
		n++
		return true
	})
	if n != s.open {
		t.Fatalf("%d tables in the open map, counted %d", n, s.open)
	}
	return n
}

// TestTablesCloseWhenUnused runs a store that keeps 4 tables open over
// 40: every table still answers as before (entities, statistics saved
// before it closed, range groups through the group index, splits, drops,
// a crash's recount), while at most 4 are open once none is in use.
func TestTablesCloseWhenUnused(t *testing.T) {
	const limit, tables = 4, 40
	e := newEnv(t, &Options{TableCacheSize: limit})
	ctx := context.Background()
	name := func(i int) string { return fmt.Sprintf("Table%02d", i) }
	group := func(i int) uint64 { return uint64(100 + i) }
	for i := range tables {
		if i%2 == 0 {
			e.createTableInGroup(name(i), group(i))
		} else {
			e.createTable(name(i))
		}
		if n := openCount(t, e.s); n > limit {
			t.Fatalf("after creating %d tables, %d are open (limit %d)", i+1, n, limit)
		}
	}
	write := func(round int) {
		for i := range tables {
			for k := range 3 {
				mustApply(t, e.s, name(i), Op{Kind: OpInsertOrReplace, Entity: ent("p", fmt.Sprint(k), "round", round)})
			}
			if n := openCount(t, e.s); n > limit {
				t.Fatalf("after writing table %d, %d are open", i, n)
			}
		}
	}
	write(1)
	check := func(what string, round int) {
		t.Helper()
		for i := range tables {
			got, err := e.s.GetEntity(ctx, acct, name(i), "p", "2")
			if err != nil || props(mustEntity(t, got))["round"].Int32() != int32(round) {
				t.Fatalf("%s: table %d: %v, %v", what, i, got, err)
			}
			infos, err := e.s.Ranges(ctx, acct, name(i))
			if err != nil || len(infos) != 1 || infos[0].Entities != 3 {
				t.Fatalf("%s: table %d's ranges %+v, %v: want one of 3 entities (its statistics saved when it closed)", what, i, infos, err)
			}
			if i%2 == 0 {
				tg, ok := mustGroupTable(t, e.s, group(i))
				if !ok || tg.Table != name(i) || tg.Group.ID != group(i) {
					t.Fatalf("%s: GroupTable(%d) = %+v, %v", what, group(i), tg, ok)
				}
			}
		}
		if n := openCount(t, e.s); n > limit {
			t.Fatalf("%s: %d tables open", what, n)
		}
	}
	check("written", 1)

	// A split and a drop of tables not open.
	if err := e.s.SplitTableRange(ctx, acct, name(0), group(0), "m", 900); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= limit+1; i++ {
		e.s.GetTable(ctx, acct, name(i)) // close Table00 again
	}
	if tg, ok := mustGroupTable(t, e.s, 900); !ok || tg.Table != name(0) || tg.Group.Start != "m" {
		t.Fatalf("the split's child: %+v, %v", tg, ok)
	}
	if err := e.s.SplitTableRange(ctx, acct, name(2), group(2), "m", 900); !IsCode(err, CodeInvalidInput) {
		t.Fatalf("a split to a group another table (not open) has: %v, want InvalidInput", err)
	}
	if err := e.s.DeleteTable(ctx, acct, name(38)); err != nil {
		t.Fatal(err)
	}
	if _, ok := mustGroupTable(t, e.s, group(38)); ok {
		t.Fatal("a dropped table's group is still found")
	}
	if _, err := e.s.GetTable(ctx, acct, name(38)); !IsCode(err, CodeTableNotFound) {
		t.Fatalf("a dropped table: %v", err)
	}
	if _, err := e.s.CreateTable(ctx, acct, name(37)); !IsCode(err, CodeTableAlreadyExists) {
		t.Fatalf("creating a table that exists, not open: %v", err)
	}
	e.createTableInGroup(name(38), group(38)) // again, empty
	mustApply(t, e.s, name(38), Op{Kind: OpInsertOrReplace, Entity: ent("p", "0", "round", 1)})
	mustApply(t, e.s, name(38), Op{Kind: OpInsertOrReplace, Entity: ent("p", "1", "round", 1)})
	mustApply(t, e.s, name(38), Op{Kind: OpInsertOrReplace, Entity: ent("p", "2", "round", 1)})
	wantGroups := tables/2 + 1
	if got := len(e.s.TableGroups()); got != wantGroups {
		t.Fatalf("TableGroups lists %d groups, want %d", got, wantGroups)
	}
	if st := e.s.Stats(); st.Tables != tables || st.Ranges != tables {
		t.Fatalf("Stats: %d tables, %d ranges; want %d of each", st.Tables, st.Ranges, tables)
	}
	check("after a split and a drop", 1)

	e.reopen()
	if st := e.s.Stats(); st.Tables != tables || st.Ranges != tables {
		t.Fatalf("Stats after a reopen: %d tables, %d ranges", st.Tables, st.Ranges)
	}
	check("reopened", 1)

	// A crash loses the statistics saved since the last save; the
	// recount at the first maintenance tick counts every table again,
	// open or not.
	write(2)
	c := e.crashClone()
	c.open()
	defer c.s.Close()
	for i := range tables {
		if infos, _ := c.s.Ranges(ctx, acct, name(i)); len(infos) != 1 {
			t.Fatalf("table %d after the crash: ranges %+v", i, infos)
		}
	}
	c.s.maintain(0)
	e.s.Close()
	e.s = c.s
	check("recounted after a crash", 2)
}

func mustEntity(t *testing.T, se StoredEntity) *odata.Entity {
	t.Helper()
	ent, err := se.Entity()
	if err != nil {
		t.Fatal(err)
	}
	return ent
}

// TestTableCacheUnderConcurrentUse has writers, readers and a dropper
// share 20 tables of a store that keeps 3 open: every write acknowledged
// to a table not dropped since is read back, and once all is done no
// table is left pinned or half closed.
func TestTableCacheUnderConcurrentUse(t *testing.T) {
	e := newEnv(t, &Options{TableCacheSize: 3})
	ctx := context.Background()
	const tables, workers, ops = 20, 6, 300
	name := func(i int) string { return fmt.Sprintf("conc%02d", i) }
	for i := range tables {
		e.createTableInGroup(name(i), uint64(10+i))
	}
	var (
		mu      sync.Mutex
		written = map[[2]int]bool{} // {table, row} acknowledged
		dropped = map[int]bool{}
	)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for k := range ops {
				i := rng.IntN(tables - 2) // the last two are dropped and made again
				switch k % 4 {
				case 0, 1:
					row := w*ops + k
					_, err := e.s.Apply(ctx, acct, name(i), Op{Kind: OpInsert, Entity: ent("p", fmt.Sprint(row))})
					if err != nil {
						t.Errorf("insert into %s: %v", name(i), err)
						return
					}
					mu.Lock()
					written[[2]int{i, row}] = true
					mu.Unlock()
				case 2:
					if _, ok := mustGroupTable(t, e.s, uint64(10+i)); !ok {
						t.Errorf("group %d not found", 10+i)
						return
					}
				case 3:
					if _, err := e.s.Ranges(ctx, acct, name(i)); err != nil {
						t.Errorf("ranges of %s: %v", name(i), err)
						return
					}
				}
			}
		})
	}
	wg.Go(func() {
		for k := range 40 {
			i := tables - 2 + k%2
			if err := e.s.DeleteTable(ctx, acct, name(i)); err != nil {
				t.Errorf("drop %s: %v", name(i), err)
				return
			}
			e.createTableInGroup(name(i), uint64(1000+k))
			mu.Lock()
			dropped[i] = true
			mu.Unlock()
		}
	})
	wg.Wait()
	for key := range written {
		if _, err := e.s.GetEntity(ctx, acct, name(key[0]), "p", fmt.Sprint(key[1])); err != nil {
			t.Fatalf("acknowledged write %v: %v", key, err)
		}
	}
	openCount(t, e.s)
	e.s.tables.Range(func(_, v any) bool {
		if refs := v.(*table).refs.Load(); refs != 0 {
			t.Errorf("table %s left with %d users", v.(*table).name, refs)
		}
		return true
	})
	if st := e.s.Stats(); st.Tables != tables || st.Ranges != tables {
		t.Fatalf("Stats: %d tables, %d ranges; want %d of each", st.Tables, st.Ranges, tables)
	}
}

// TestOpenUpgradesLayout1 opens a store of layout 1, which has no group
// index: Open builds it and records layout 2, so range groups of tables
// not open are found. A layout this build does not know is refused.
func TestOpenUpgradesLayout1(t *testing.T) {
	e := newEnv(t, &Options{TableCacheSize: 2})
	for i := range 10 {
		e.createTableInGroup(fmt.Sprintf("old%d", i), uint64(50+i))
	}
	// Make it a store of layout 1: no index, the old version.
	b := e.s.db.NewBatch()
	for i := range 10 {
		b.Delete(groupMetaKey(metaGroupTable, uint64(50+i)))
	}
	b.Set(metaKey(metaLayout), binary.AppendUvarint(nil, 1))
	if err := e.s.db.Apply(b, e.s.syncWO); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	for i := range 10 {
		if tg, ok := mustGroupTable(t, e.s, uint64(50+i)); !ok || tg.Table != fmt.Sprintf("old%d", i) {
			t.Fatalf("group %d after the upgrade: %+v, %v", 50+i, tg, ok)
		}
	}
	v, err := e.s.db.Get(metaKey(metaLayout))
	if ver, _ := binary.Uvarint(v); err != nil || ver != layoutVersion {
		t.Fatalf("layout after the upgrade: %d, %v", ver, err)
	}

	if err := e.s.db.Set(metaKey(metaLayout), binary.AppendUvarint(nil, layoutVersion+1), e.s.syncWO); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Close(); err != nil {
		t.Fatal(err)
	}
	e.s = nil
	if s, err := open("db", &e.opts, e.tune); err == nil {
		s.Close()
		t.Fatal("a store of a newer layout opened")
	}
}

// FuzzGroupIndexValue feeds the group index's decoder (01 0a,
// docs/keys.md) garbage: it never panics, refuses as corruption, and an
// entry it takes encodes to the same bytes.
func FuzzGroupIndexValue(f *testing.F) {
	f.Add(encodeGroupIndexValue(acct, "mytable"))
	f.Add(encodeGroupIndexValue("a\x00b", ""))
	f.Add([]byte{1, nsCatalog, 0, 1})
	f.Add([]byte{2})
	f.Fuzz(func(t *testing.T, v []byte) {
		account, lower, err := decodeGroupIndexValue(v)
		if err != nil {
			if !errors.Is(err, lsm.ErrCorruption) {
				t.Fatalf("%x: %v, not corruption", v, err)
			}
			return
		}
		if again := encodeGroupIndexValue(account, lower); !bytes.Equal(again, v) {
			t.Fatalf("%x decodes to (%q, %q), which encodes to %x", v, account, lower, again)
		}
	})
}

// TestBusyTableStaysOpen opens table after table in a store that keeps
// two open, using one busy table between them: the busy table is never
// the one closed, so it keeps its object and its load averages, while
// the tables used once close. (A sweep that cleared use bits and closed
// in one go closed busy tables too, and the cluster's lease balancer,
// which follows their load averages, lost sight of them.)
func TestBusyTableStaysOpen(t *testing.T) {
	e := newEnv(t, &Options{TableCacheSize: 2})
	ctx := context.Background()
	e.createTable("busy")
	mustApply(t, e.s, "busy", Op{Kind: OpInsert, Entity: ent("p", "r")})
	busy, err := e.s.lookupTable(acct, "busy")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		e.createTable(fmt.Sprintf("once%d", i))
		time.Sleep(2 * time.Millisecond) // past the granularity of a use's time
		if _, err := e.s.GetEntity(ctx, acct, "busy", "p", "r"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
		if again, _ := e.s.lookupTable(acct, "busy"); again != busy {
			t.Fatalf("after opening table %d the busy table was closed and opened again", i)
		}
		if n := openCount(t, e.s); n > 2 {
			t.Fatalf("%d tables open", n)
		}
	}
}

// TestGroupTableReportsUnreadableCatalog: a group whose table is not open
// is looked up on disk, and a lookup that cannot read (here, a closed
// engine) is an error, never "no such group": a cluster deletes the log
// of a group the catalog does not name.
func TestGroupTableReportsUnreadableCatalog(t *testing.T) {
	e := newEnv(t, &Options{TableCacheSize: 1})
	e.createTableInGroup("first", 7)
	e.createTableInGroup("second", 8) // closes first
	if _, ok := mustGroupTable(t, e.s, 8); !ok {
		t.Fatal("group 8 not found")
	}
	s := e.s
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	e.s = nil
	if _, ok, err := s.GroupTable(7); err == nil {
		t.Fatalf("group 7 looked up in a closed store: ok %v and no error", ok)
	}
}
