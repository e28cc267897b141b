package cluster

import (
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// TestAnswerFollowsTheAppliedIndex holds a range group's apply goroutine
// between applying a write and recording its index as applied: the
// writer's answer waits for the index, so that a client holding its
// answer finds the replica applied past its write. With the answer first,
// a test waiting for replicas to apply as far as the furthest could stop
// short of a write already acknowledged and find it missing (the
// convergence tests failed so, about once in twenty runs under load).
func TestAnswerFollowsTheAppliedIndex(t *testing.T) {
	c := newTablesCluster(t, 3, 27)
	createVia(c, "answered")
	g := c.tableGroup("answered")
	var hold atomic.Bool
	c.prepare = func(tn *testNode) {
		tn.node.afterApplyEntry = func(group, index uint64) {
			if group == g.ID && hold.Load() {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	c.restartAll()
	upsertVia(c, "answered", "p", "first", 1)
	hold.Store(true)
	for i := range 5 {
		upsertVia(c, "answered", "p", "held", i)
		ld := c.groupLeader(g.ID, 10*time.Second)
		stored, err := ld.node.st().AppliedIndex(g.ID)
		if err != nil {
			t.Fatal(err)
		}
		if applied := ld.node.testGroup(g.ID).applied.Load(); applied < stored {
			t.Fatalf("write %d acknowledged with the leader's replica applied to %d, its store to %d", i, applied, stored)
		}
	}
}

// TestDurablePrefix checks which committed entries a turn hands to the
// apply goroutine before its own write: those its log holds on disk
// already, up to the first configuration change, and none that the write
// appends or rewrites (a conflicting tail replaced in the same Ready).
func TestDurablePrefix(t *testing.T) {
	normal := func(from, to uint64) []*raftpb.Entry {
		var ents []*raftpb.Entry
		for i := from; i <= to; i++ {
			ents = append(ents, &raftpb.Entry{Index: proto.Uint64(i), Type: raftpb.EntryType_EntryNormal.Enum()})
		}
		return ents
	}
	withConf := normal(5, 9)
	withConf[2].Type = raftpb.EntryType_EntryConfChange.Enum()
	for _, tc := range []struct {
		name      string
		last      uint64
		entries   []*raftpb.Entry
		committed []*raftpb.Entry
		want      int
	}{
		{"all on disk", 10, nil, normal(5, 9), 5},
		{"some appended by this write", 7, normal(8, 12), normal(5, 9), 3},
		{"a tail rewritten by this write", 10, normal(8, 12), normal(5, 9), 3},
		{"none on disk", 4, normal(5, 9), normal(5, 9), 0},
		{"a configuration change", 10, nil, withConf, 2},
		{"nothing committed", 10, normal(11, 12), nil, 0},
	} {
		rd := raft.Ready{Entries: tc.entries, CommittedEntries: tc.committed}
		if got := durablePrefix(tc.last, rd); got != tc.want {
			t.Errorf("%s: durablePrefix = %d, want %d", tc.name, got, tc.want)
		}
	}
}
