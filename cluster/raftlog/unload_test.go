package raftlog

import (
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/tabuladb/tabula/vfs"
)

// TestUnloadLoadsAgain: a group unloaded is loaded from the engine by the
// next Group, with every part of its state as it was (entries, hard and
// conf state, compaction, replica record), unsynced writes included; a
// Write to an unloaded group loads it first; a group never written loads
// empty.
func TestUnloadLoadsAgain(t *testing.T) {
	l := mustOpen(t, testOptions(vfs.NewMem(), 0))
	defer l.Close()
	const g, other, id = 4, 5, 2 | 7<<32
	for _, grp := range []uint64{g, other} {
		commit(t, l, true, func(w *Write) {
			w.SetReplicaID(grp, id)
			w.Append(grp, []*pb.Entry{ent(1, 1, []byte("a")), ent(2, 1, []byte("b")), ent(3, 2, []byte("c")), ent(4, 2, []byte("d"))})
			w.SetConfState(grp, 2, &pb.ConfState{Voters: []uint64{1, id}})
			w.SetHardState(grp, hardState(2, 1, 4))
		})
	}
	if err := l.mustGroup(g).Compact(2); err != nil {
		t.Fatal(err)
	}
	commit(t, l, false, func(w *Write) { w.Append(g, []*pb.Entry{ent(5, 2, []byte("e"))}) })
	before := dumpAll(t, l, []uint64{g, other})
	rec := l.mustGroup(g).Replica()
	old := l.mustGroup(g)

	l.Unload(g)
	s := l.mustGroup(g)
	if s == old {
		t.Fatal("Group returned the unloaded Storage")
	}
	if got := dumpAll(t, l, []uint64{g, other}); got != before {
		t.Fatalf("after Unload and Group:\n%s\nwant\n%s", got, before)
	}
	if got := s.Replica(); got != rec {
		t.Fatalf("replica record after a reload: %+v, want %+v", got, rec)
	}

	l.Unload(g)
	commit(t, l, true, func(w *Write) {
		w.Append(g, []*pb.Entry{ent(6, 3, []byte("f"))})
		w.SetHardState(g, hardState(3, 1, 6))
	})
	if last, err := l.mustGroup(g).LastIndex(); err != nil || last != 6 {
		t.Fatalf("LastIndex after a Write to the unloaded group: %d, %v, want 6", last, err)
	}
	if fi, err := l.mustGroup(g).FirstIndex(); err != nil || fi != 3 {
		t.Fatalf("FirstIndex after a Write to the unloaded group: %d, %v, want 3 (compacted through 2)", fi, err)
	}

	l.Unload(99)
	if !l.mustGroup(99).Empty() {
		t.Fatal("a group never written is not empty once loaded")
	}
}
