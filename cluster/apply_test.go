package cluster

import (
	"sync/atomic"
	"testing"
	"time"
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
