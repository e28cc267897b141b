package raftlog

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/vfs"
)

// TestReplicaRecord follows a member of a group through its life on a
// node: its raft id and the conf state's index are kept across reopens,
// a snapshot moves the conf index to its own, a removal leaves only the
// record (marked), refusing writes and bootstraps, and DeleteGroup
// forgets it.
func TestReplicaRecord(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, testOptions(fs, 0))
	reopen := func() {
		t.Helper()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l = mustOpen(t, testOptions(fs, 0))
	}
	defer func() { l.Close() }()
	const g, id = 7, 3 | 41<<32
	if got := l.mustGroup(g).Replica(); got != (Replica{}) {
		t.Fatalf("a new group's record: %+v", got)
	}
	commit(t, l, true, func(w *Write) {
		w.SetReplicaID(g, id)
		w.Append(g, []*pb.Entry{ent(1, 1, nil), ent(2, 1, nil), ent(3, 1, nil)})
		w.SetConfState(g, 2, &pb.ConfState{Voters: []uint64{1, 2}, Learners: []uint64{id}})
		w.SetHardState(g, hardState(1, 0, 3))
	})
	reopen()
	if got, want := l.mustGroup(g).Replica(), (Replica{ID: id, ConfIndex: 2}); got != want {
		t.Fatalf("record after a reopen: %+v, want %+v", got, want)
	}
	snap := &pb.SnapshotMetadata{Index: proto.Uint64(9), Term: proto.Uint64(2), ConfState: &pb.ConfState{Voters: []uint64{1, 2, id}}}
	commit(t, l, true, func(w *Write) { w.ApplySnapshot(g, snap) })
	reopen()
	if got, want := l.mustGroup(g).Replica(), (Replica{ID: id, ConfIndex: 9}); got != want {
		t.Fatalf("record after a snapshot: %+v, want %+v", got, want)
	}

	if err := l.RemoveReplica(g, id); err != nil {
		t.Fatal(err)
	}
	reopen()
	s := l.mustGroup(g)
	if got, want := s.Replica(), (Replica{ID: id, Removed: true}); got != want {
		t.Fatalf("record after the removal: %+v, want %+v", got, want)
	}
	if hs, cs, err := s.InitialState(); err != nil || hs != nil || len(cs.GetVoters()) != 0 {
		t.Fatalf("a removed member's raft state: %v %v %v", hs, cs, err)
	}
	if first, _ := s.FirstIndex(); first != 1 {
		t.Fatalf("FirstIndex after the removal = %d", first)
	}
	if ids, err := l.Groups(); err != nil || !slices.Equal(ids, []uint64{g}) {
		t.Fatalf("Groups lists the removed member's group: %v, %v", ids, err)
	}
	if err := s.Bootstrap(&pb.ConfState{Voters: []uint64{id}}); err == nil {
		t.Fatal("Bootstrap of a removed member's group succeeded")
	}
	if err := l.DeleteGroup(g); err != nil {
		t.Fatal(err)
	}
	reopen()
	if got := l.mustGroup(g).Replica(); got != (Replica{}) {
		t.Fatalf("record after DeleteGroup: %+v", got)
	}

	// A write to a removed member's group is a bug of the caller's: it is
	// refused, and, like every refused write, stops the log.
	if err := l.RemoveReplica(g, id); err != nil {
		t.Fatal(err)
	}
	w := l.NewWrite()
	w.SetHardState(g, hardState(5, 0, 0))
	if err := w.Commit(true); err == nil {
		t.Fatal("a write to a removed member's group succeeded")
	}
}

// TestFormatVersionOneIsUpgradedByARecord opens a log written by format
// version 1: it reads as it is, and the first replica record written
// moves it to version 2; a version-1 log holding a record is corrupt.
func TestFormatVersionOneIsUpgradedByARecord(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, testOptions(fs, 0))
	commit(t, l, true, func(w *Write) {
		w.Append(1, []*pb.Entry{ent(1, 1, nil)})
		w.SetConfState(1, 0, &pb.ConfState{Voters: []uint64{1}})
	})
	l.Close()
	setVersion := func(v uint64, extra ...[2][]byte) {
		t.Helper()
		db, err := lsm.Open(testDir, &lsm.Options{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Set(formatVersionKey, binary.AppendUvarint(nil, v), nil); err != nil {
			t.Fatal(err)
		}
		for _, kv := range extra {
			if err := db.Set(kv[0], kv[1], nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	version := func() uint64 {
		t.Helper()
		db, err := lsm.Open(testDir, &lsm.Options{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		v, err := db.Get(formatVersionKey)
		if err != nil {
			t.Fatal(err)
		}
		ver, _ := binary.Uvarint(v)
		return ver
	}
	setVersion(1)
	l = mustOpen(t, testOptions(fs, 0))
	if ents, err := l.mustGroup(1).Entries(1, 2, 1<<20); err != nil || len(ents) != 1 {
		t.Fatalf("a version-1 log's entries: %v, %v", ents, err)
	}
	// A conf state with no index writes no record, so no upgrade.
	commit(t, l, true, func(w *Write) { w.SetConfState(1, 0, &pb.ConfState{Voters: []uint64{1, 2}}) })
	l.Close()
	if v := version(); v != 1 {
		t.Fatalf("version after a write without a record: %d", v)
	}
	l = mustOpen(t, testOptions(fs, 0))
	commit(t, l, true, func(w *Write) { w.SetConfState(1, 1, &pb.ConfState{Voters: []uint64{1, 2}}) })
	l.Close()
	if v := version(); v != 2 {
		t.Fatalf("version after a record: %d", v)
	}
	l = mustOpen(t, testOptions(fs, 0))
	if got := l.mustGroup(1).Replica(); got.ConfIndex != 1 {
		t.Fatalf("record: %+v", got)
	}
	l.Close()

	setVersion(1)
	if l, err := Open(testDir, testOptions(fs, 0)); err == nil || !errors.Is(err, lsm.ErrCorruption) {
		if err == nil {
			l.Close()
		}
		t.Fatalf("a version-1 log with a replica record opened: %v", err)
	}
}

// TestReplicaRecordCorruption refuses records that do not decode, and a
// removed member's group that holds raft state.
func TestReplicaRecordCorruption(t *testing.T) {
	for name, v := range map[string][]byte{
		"empty":        {},
		"no flags":     {5, 0},
		"bad flags":    {5, 0, 2},
		"extra bytes":  {5, 0, 0, 0},
		"bad uvarint":  {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"removed+logs": Replica{ID: 1, Removed: true}.encode(),
	} {
		t.Run(name, func(t *testing.T) {
			l, err := corruptLog(t, setKey(stateKey(1, kindReplica), v))
			if err == nil {
				l.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, lsm.ErrCorruption) {
				t.Fatalf("Open: %v, not corruption", err)
			}
		})
	}
	// A record is the only key that may follow the entries.
	l, err := corruptLog(t, setKey(stateKey(1, kindReplica+1), []byte{1}))
	if err == nil || !errors.Is(err, lsm.ErrCorruption) {
		if err == nil {
			l.Close()
		}
		t.Fatalf("an unknown key after the entries: %v", err)
	}
}

// setKey is a corruptLog damage: key set to value.
func setKey(key, value []byte) func(db *lsm.DB) {
	return func(db *lsm.DB) {
		if err := db.Set(key, value, nil); err != nil {
			panic(err)
		}
	}
}

// TestBootstrapMember bootstraps a group whose member here has a raft id
// of its own, its log starting after a snapshot position: the record
// keeps the id, and the log its position, across a reopen.
func TestBootstrapMember(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, testOptions(fs, 0))
	cs := &pb.ConfState{Voters: []uint64{1, 2 | 9<<32}}
	if err := l.mustGroup(4).BootstrapMember(cs, 2|9<<32, 5, 2); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l = mustOpen(t, testOptions(fs, 0))
	defer l.Close()
	g := l.mustGroup(4)
	if rec := g.Replica(); rec.ID != 2|9<<32 || rec.ConfIndex != 5 {
		t.Fatalf("record after a reopen: %+v", rec)
	}
	// The log starts after (5, 2): entry 5 is the last compacted and
	// committed one, and nothing before it is there.
	if first, _ := g.FirstIndex(); first != 6 {
		t.Fatalf("FirstIndex = %d, want 6", first)
	}
	if last, _ := g.LastIndex(); last != 5 {
		t.Fatalf("LastIndex = %d, want 5", last)
	}
	if term, err := g.Term(5); err != nil || term != 2 {
		t.Fatalf("Term(5) = %d, %v", term, err)
	}
	if hs, _, _ := g.InitialState(); hs.GetCommit() != 5 || hs.GetTerm() != 2 {
		t.Fatalf("hard state %v", hs)
	}
	if _, got, err := l.mustGroup(4).InitialState(); err != nil || !slices.Equal(got.GetVoters(), cs.GetVoters()) {
		t.Fatalf("conf state: %v, %v", got, err)
	}
	if err := l.mustGroup(4).BootstrapMember(cs, 2|9<<32, 5, 2); err == nil {
		t.Fatal("a second bootstrap succeeded")
	}
}
