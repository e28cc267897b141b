package partition

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/vfs"
)

const acct = "devstoreaccount1"

// testEnv is a store on an in-memory filesystem that tests can reopen.
type testEnv struct {
	t    testing.TB
	fs   vfs.FS
	opts Options
	tune tuning
	s    *Store
}

// newEnv opens a store with no maintenance goroutine (tests tick it with
// maintain) and small engine buffers.
func newEnv(t testing.TB, opts *Options) *testEnv {
	t.Helper()
	return newEnvTuned(t, opts, tuning{persistEvery: 30, mergeMinAge: 2})
}

func newEnvTuned(t testing.TB, opts *Options, tune tuning) *testEnv {
	t.Helper()
	e := &testEnv{t: t, fs: vfs.NewMem(), tune: tune}
	if opts != nil {
		e.opts = *opts
	}
	e.opts.LSM.FS = e.fs
	if e.opts.LSM.MemTableSize == 0 {
		e.opts.LSM.MemTableSize = 1 << 20
	}
	e.open()
	t.Cleanup(func() {
		if e.s != nil {
			if err := e.s.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		}
	})
	return e
}

func (e *testEnv) open() {
	e.t.Helper()
	s, err := open("db", &e.opts, e.tune)
	if err != nil {
		e.t.Fatalf("open: %v", err)
	}
	e.s = s
}

// crashClone returns an environment, not yet open, on what a power loss
// would leave of e's in-memory files now (synced data only).
func (e *testEnv) crashClone() *testEnv {
	c := &testEnv{t: e.t, fs: e.fs.(*vfs.MemFS).CrashClone(nil), opts: e.opts, tune: e.tune}
	c.opts.LSM.FS = c.fs
	return c
}

func (e *testEnv) reopen() {
	e.t.Helper()
	if err := e.s.Close(); err != nil {
		e.t.Fatalf("close: %v", err)
	}
	e.s = nil
	e.open()
}

func (e *testEnv) createTable(name string) {
	e.t.Helper()
	if _, err := e.s.CreateTable(context.Background(), acct, name); err != nil {
		e.t.Fatalf("create table %s: %v", name, err)
	}
}

// createTableInGroup creates table name with range group id, whose one
// voter is node 1.
func (e *testEnv) createTableInGroup(name string, id uint64) {
	e.t.Helper()
	if _, err := e.s.CreateTableInGroup(context.Background(), acct, name, RangeGroup{ID: id, Voters: []uint64{1}}); err != nil {
		e.t.Fatalf("create table %s in group %d: %v", name, id, err)
	}
}

// ent builds an entity; props alternate names and values.
func ent(pk, rk string, props ...any) *odata.Entity {
	e := &odata.Entity{PartitionKey: pk, RowKey: rk}
	for i := 0; i+1 < len(props); i += 2 {
		var v odata.Value
		switch x := props[i+1].(type) {
		case int:
			v = odata.Int32Value(int32(x))
		case int64:
			v = odata.Int64Value(x)
		case string:
			v = odata.StringValue(x)
		case bool:
			v = odata.BoolValue(x)
		case float64:
			v = odata.DoubleValue(x)
		case odata.Value:
			v = x
		default:
			panic(fmt.Sprintf("ent: unsupported %T", x))
		}
		e.Properties = append(e.Properties, odata.Property{Name: props[i].(string), Value: v})
	}
	return e
}

func mustApply(t testing.TB, s *Store, table string, op Op) StoredEntity {
	t.Helper()
	r, err := s.Apply(context.Background(), acct, table, op)
	if err != nil {
		t.Fatalf("%v (%q,%q): %v", op.Kind, op.Entity.PartitionKey, op.Entity.RowKey, err)
	}
	return r
}

// wantCode fails unless err carries code ("" means no error).
func wantCode(t testing.TB, what string, err error, code string) {
	t.Helper()
	if got := ErrorCode(err); got != code || (code == "" && err != nil) {
		t.Fatalf("%s: error %v (code %q), want code %q", what, err, got, code)
	}
}

// rawKeys counts the keys physically present in [lo, hi) of the engine.
func rawKeys(t testing.TB, db *lsm.DB, lo, hi []byte) int {
	t.Helper()
	it := db.NewIter(&lsm.IterOptions{LowerBound: lo, UpperBound: hi})
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return n
}

// stepClock returns a clock that advances by step on every call.
func stepClock(start time.Time, step time.Duration) func() time.Time {
	var mu = make(chan struct{}, 1)
	now := start
	return func() time.Time {
		mu <- struct{}{}
		defer func() { <-mu }()
		now = now.Add(step)
		return now
	}
}

func props(e *odata.Entity) map[string]odata.Value {
	m := map[string]odata.Value{}
	for _, p := range e.Properties {
		m[p.Name] = p.Value
	}
	return m
}

// lookupTable returns a live table's object for a test to look into. It
// is not pinned: a test that closes tables (a small TableCacheSize) must
// pin what it keeps.
func (s *Store) lookupTable(account, name string) (*table, error) {
	t, err := s.acquireTable(account, name)
	if err != nil {
		return nil, err
	}
	t.release()
	return t, nil
}

// liveTables lists the open tables, unpinned (as lookupTable).
func (s *Store) liveTables() []*table {
	ts := s.openTables()
	releaseAll(ts)
	return ts
}

// mustGroupTable is Store.GroupTable for a test, failing it on an error.
func mustGroupTable(t testing.TB, s *Store, id uint64) (TableGroup, bool) {
	t.Helper()
	tg, ok, err := s.GroupTable(id)
	if err != nil {
		t.Fatalf("GroupTable(%d): %v", id, err)
	}
	return tg, ok
}

// mustRecorded is s.SpanRecorded(group), failing the test on an error.
func mustRecorded(t testing.TB, s *Store, group uint64) bool {
	t.Helper()
	recorded, err := s.SpanRecorded(group)
	if err != nil {
		t.Fatal(err)
	}
	return recorded
}

// mustMerged is s.GroupMerged(group), failing the test on an error.
func mustMerged(t testing.TB, s *Store, group uint64) []uint64 {
	t.Helper()
	merged, err := s.GroupMerged(group)
	if err != nil {
		t.Fatal(err)
	}
	return merged
}
