package partition

import (
	"context"
	"maps"
	"testing"
	"time"
)

// TestNodeDownRecords: the nodes recorded down are read back, a record is
// replaced and cleared, and the records survive a reopen.
func TestNodeDownRecords(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t1, t2 := time.Unix(1_700_000_000, 123), time.Unix(1_700_000_100, 0)
	for _, c := range []struct {
		node  uint64
		since time.Time
	}{{2, t1}, {7, t1}, {7, t2}, {9, t2}, {9, time.Time{}}, {4, time.Time{}}} {
		if err := s.SetNodeDown(ctx, c.node, c.since); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetNodeDown(ctx, 0, t1); err == nil {
		t.Fatal("node 0 recorded")
	}
	want := map[uint64]time.Time{2: t1, 7: t2}
	check := func(s *Store) {
		t.Helper()
		got, err := s.NodesDown()
		if err != nil {
			t.Fatal(err)
		}
		if !maps.EqualFunc(got, want, time.Time.Equal) {
			t.Fatalf("nodes down %v, want %v", got, want)
		}
	}
	check(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, nil); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check(s)
}
