package edmtest

import (
	"context"
	"testing"

	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
)

// StoreEntities reads every entity of every table of s: "account/table"
// -> its entities in key order.
func StoreEntities(t testing.TB, s *partition.Store) map[string][]*odata.Entity {
	t.Helper()
	out := map[string][]*odata.Entity{}
	all, err := s.AllTables()
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range all {
		key := tr.Account + "/" + tr.Name
		out[key] = []*odata.Entity{}
		q := partition.EntityQuery{}
		for {
			next, err := s.QueryEntities(context.Background(), tr.Account, tr.Name, q, func(se *partition.StoredEntity) error {
				e, err := se.Entity()
				out[key] = append(out[key], e)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if next.IsZero() {
				break
			}
			q.NextPartitionKey, q.NextRowKey = next.NextPartitionKey, next.NextRowKey
		}
	}
	return out
}

// SameStores fails t unless got and want (as StoreEntities returns them)
// hold the same tables and, in each, the same entities bit for bit, their
// timestamps aside: a store stamps what it imports anew.
func SameStores(t testing.TB, got, want map[string][]*odata.Entity) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d tables, want %d", len(got), len(want))
	}
	for table, ws := range want {
		gs, ok := got[table]
		if !ok {
			t.Fatalf("table %s missing", table)
		}
		if len(gs) != len(ws) {
			t.Fatalf("table %s: %d entities, want %d", table, len(gs), len(ws))
		}
		for i := range ws {
			g, w := *gs[i], *ws[i]
			g.Timestamp, w.Timestamp = 0, 0
			if !Same(&g, &w) {
				t.Fatalf("table %s entity %d:\n got %+v\nwant %+v", table, i, g, w)
			}
		}
	}
}
