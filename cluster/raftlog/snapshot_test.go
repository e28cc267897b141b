package raftlog

import (
	"errors"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/vfs"
)

// TestApplySnapshot moves a group's log to a snapshot's position: the old
// entries go, the snapshot's index and term are the last compacted entry,
// its conf state the group's, entries after it append, and all of it
// survives a reopen; a snapshot that does not move past the compacted
// index is refused.
func TestApplySnapshot(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, testOptions(fs, 4))
	var old []*pb.Entry
	for i := uint64(1); i <= 10; i++ {
		old = append(old, ent(i, 1, []byte{byte(i)}))
	}
	commit(t, l, true, func(w *Write) {
		w.Append(1, old)
		w.SetHardState(1, hardState(1, 1, 5))
		w.Append(2, []*pb.Entry{ent(1, 1, nil)}) // another group, untouched
	})
	meta := &pb.SnapshotMetadata{Index: proto.Uint64(20), Term: proto.Uint64(3),
		ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}}
	commit(t, l, true, func(w *Write) {
		w.ApplySnapshot(1, meta)
		w.Append(1, []*pb.Entry{ent(21, 3, []byte("a")), ent(22, 3, []byte("b"))})
		w.SetHardState(1, hardState(3, 2, 21))
	})
	check := func(l *Log, when string) {
		t.Helper()
		s := l.mustGroup(1)
		first, _ := s.FirstIndex()
		last, _ := s.LastIndex()
		if first != 21 || last != 22 {
			t.Fatalf("%s: log %d..%d, want 21..22", when, first, last)
		}
		if term, err := s.Term(20); err != nil || term != 3 {
			t.Fatalf("%s: Term(20) = %d, %v", when, term, err)
		}
		if _, err := s.Entries(10, 21, 1<<20); !errors.Is(err, raft.ErrCompacted) {
			t.Fatalf("%s: old entries: %v", when, err)
		}
		got, err := s.Entries(21, 23, 1<<20)
		if err != nil || len(got) != 2 || string(got[1].GetData()) != "b" {
			t.Fatalf("%s: new entries %v, %v", when, got, err)
		}
		_, cs, _ := s.InitialState()
		if len(cs.GetVoters()) != 3 || len(cs.GetLearners()) != 1 {
			t.Fatalf("%s: conf state %v", when, cs)
		}
		if last, _ := l.mustGroup(2).LastIndex(); last != 1 {
			t.Fatalf("%s: group 2 lost its entry", when)
		}
	}
	check(l, "after the write")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, testOptions(fs, 4))
	defer l.Close()
	check(l, "after a reopen")
	w := l.NewWrite()
	w.ApplySnapshot(1, &pb.SnapshotMetadata{Index: proto.Uint64(20), Term: proto.Uint64(3)})
	if err := w.Commit(true); err == nil {
		t.Fatal("a snapshot not past the compacted index was taken")
	}
}
