package raftlog

import (
	"slices"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/tabuladb/tabula/vfs"
)

// TestDeleteGroup deletes one of three groups: its records are gone
// after a reopen, it reads as a group with no state, and its neighbours
// (the ids on either side) keep every entry.
func TestDeleteGroup(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, testOptions(fs, 0))
	w := l.NewWrite()
	for _, g := range []uint64{4, 5, 6} {
		w.SetConfState(g, 0, &pb.ConfState{Voters: []uint64{1, 2, 3}})
		w.Append(g, []*pb.Entry{ent(1, 1, []byte("a")), ent(2, 1, []byte("b"))})
		w.SetHardState(g, hardState(1, 1, 2))
	}
	if err := w.Commit(true); err != nil {
		t.Fatal(err)
	}
	if err := l.DeleteGroup(5); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, testOptions(fs, 0))
	defer l.Close()
	if ids, err := l.Groups(); err != nil || !slices.Equal(ids, []uint64{4, 6}) {
		t.Fatalf("Groups after deleting 5 = %v, %v", ids, err)
	}
	if hs, cs, err := l.mustGroup(5).InitialState(); err != nil || hs.GetCommit() != 0 || len(cs.GetVoters()) != 0 {
		t.Fatalf("deleted group's state: %v %v %v", hs, cs, err)
	}
	for _, g := range []uint64{4, 6} {
		ents, err := l.mustGroup(g).Entries(1, 3, 1<<20)
		if err != nil || len(ents) != 2 || string(ents[1].GetData()) != "b" {
			t.Fatalf("group %d after its neighbour's deletion: %v, %v", g, ents, err)
		}
	}
}
