package raftlog

import (
	"fmt"
	"maps"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/tabuladb/tabula/vfs"
)

// TestUnloadedRecords: records are stored beside the groups' state and
// apart from it: written, read, walked in group order, deleted one by one
// and cleared in batches, across a reopen; a group's deletion leaves its
// record (the node deletes it), and its record never counts as its state.
func TestUnloadedRecords(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, testOptions(fs, 0))
	commit(t, l, true, func(w *Write) {
		w.Append(3, []*pb.Entry{ent(1, 1, []byte("a"))})
		w.SetHardState(3, hardState(1, 1, 1))
	})
	want := map[uint64][]byte{}
	for g := uint64(1); g <= 2*clearBatch+5; g++ {
		want[g] = fmt.Appendf(nil, "rec %d", g)
	}
	want[^uint64(0)] = []byte{}
	if err := l.SetUnloaded(want); err != nil {
		t.Fatal(err)
	}
	if err := l.DeleteUnloaded(7); err != nil {
		t.Fatal(err)
	}
	delete(want, 7)
	if err := l.DeleteGroup(3); err != nil {
		t.Fatal(err)
	}
	if ids, err := l.Groups(); err != nil || len(ids) != 0 {
		t.Fatalf("Groups with only unloaded records = %v, %v; want none", ids, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, testOptions(fs, 0))
	defer l.Close()
	if !l.mustGroup(8).Empty() {
		t.Fatal("a group with only an unloaded record is not empty")
	}
	for _, g := range []uint64{1, 3, 7, ^uint64(0)} {
		rec, ok, err := l.Unloaded(g)
		if err != nil || ok != hasKey(want, g) || string(rec) != string(want[g]) {
			t.Fatalf("Unloaded(%d) = %q, %v, %v; want %q, %v", g, rec, ok, err, want[g], hasKey(want, g))
		}
	}
	got := map[uint64][]byte{}
	var last uint64
	if err := l.EachUnloaded(func(g uint64, rec []byte) bool {
		if g <= last && len(got) > 0 {
			t.Fatalf("EachUnloaded gave %d after %d", g, last)
		}
		last, got[g] = g, append([]byte{}, rec...)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(got, want, func(a, b []byte) bool { return string(a) == string(b) }) {
		t.Fatalf("EachUnloaded walked %d records; want %d", len(got), len(want))
	}
	seen := 0
	if err := l.EachUnloaded(func(uint64, []byte) bool { seen++; return seen < 3 }); err != nil || seen != 3 {
		t.Fatalf("a walk stopped at the third record saw %d (%v)", seen, err)
	}
	n, err := l.ClearUnloaded()
	if err != nil || n != len(want) {
		t.Fatalf("ClearUnloaded = %d, %v; want %d", n, err, len(want))
	}
	if err := l.EachUnloaded(func(g uint64, _ []byte) bool {
		t.Fatalf("record of group %d left after ClearUnloaded", g)
		return false
	}); err != nil {
		t.Fatal(err)
	}
}

// TestUnloadedRecordsRefuseAfterFailure: a Log whose writes stopped, or
// closed, refuses unloaded records too.
func TestUnloadedRecordsRefuseAfterFailure(t *testing.T) {
	l := mustOpen(t, testOptions(vfs.NewMem(), 0))
	l.fail(fmt.Errorf("injected"))
	if err := l.SetUnloaded(map[uint64][]byte{1: nil}); err == nil {
		t.Fatal("SetUnloaded after a failure succeeded")
	}
	if err := l.DeleteUnloaded(1); err == nil {
		t.Fatal("DeleteUnloaded after a failure succeeded")
	}
	if _, err := l.ClearUnloaded(); err == nil {
		t.Fatal("ClearUnloaded after a failure succeeded")
	}
	l.Close()
}

func hasKey[V any](m map[uint64]V, k uint64) bool {
	_, ok := m[k]
	return ok
}
