package cluster

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/tabuladb/tabula/cluster/command"
	"github.com/tabuladb/tabula/partition"
)

// TestLateRangeEntryStaysOutOfARecreatedTable applies on one replica,
// late, an entry of a table's old range group after the table was
// dropped and created again without a group (by a leader whose
// RangeGroups is off, during a rolling change). A replica that applied it
// before the drop lost it with the old table, so this one must refuse it,
// not write it into the new table (found by review: it was let through).
func TestLateRangeEntryStaysOutOfARecreatedTable(t *testing.T) {
	c := newTablesCluster(t, 3, 21)
	createVia(c, "late")
	g := c.tableGroup("late")
	c.groupLeader(g.ID, 10*time.Second)
	node := c.nodes[2].node
	// A voter hosts the group as it applies the table's creation, which
	// may come after the group has its leader.
	old := node.testGroup(g.ID)
	for deadline := time.Now().Add(10 * time.Second); old == nil; old = node.testGroup(g.ID) {
		if time.Now().After(deadline) {
			t.Fatal("node 2 hosts no replica")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := retryAny(c, func(s *Store) (struct{}, error) {
		return struct{}{}, s.DeleteTable(context.Background(), acct, "late")
	}); err != nil {
		t.Fatal(err)
	}
	// Created again by a leader with RangeGroups off (a rolling change).
	if _, err := retryAny(c, func(s *Store) (result, error) {
		return s.write(context.Background(), &command.Command{Kind: command.KindCreateTable, Account: acct, Table: "late"}, 0)
	}); err != nil {
		t.Fatal(err)
	}
	c.converge(10 * time.Second)
	if g2, err := node.st().TableGroup(acct, "late"); err != nil || g2.ID != 0 {
		t.Fatalf("recreated table: %+v %v", g2, err)
	}
	// Node 2 applies, late, an entry of the old group committed before the drop.
	cmd := &command.Command{Kind: command.KindApply, Account: acct, Table: "late", Ops: []partition.Op{opUpsert("p", "ghost", 7)}}
	idx := uint64(1000)
	e := &raftpb.Entry{Index: &idx, Data: cmd.Append(nil)}
	if _, err := old.applyEntry(e); err != nil {
		t.Fatal(err)
	}
	if ent, err := node.st().GetEntity(context.Background(), acct, "late", "p", "ghost"); err == nil {
		t.Fatalf("the old group's entry was written into the recreated table on node 2 only: n=%d", entityN(t, ent))
	}
}

// TestDropDuringSpanInstall drops a table while one of its group's voters
// catches up by span snapshot, the drop queued on that voter's apply
// goroutine ahead of the install raft asked for: the install finds no
// table and must do nothing, not stop the node (found by review: it did).
func TestDropDuringSpanInstall(t *testing.T) {
	c := newTablesCluster(t, 3, 23)
	createVia(c, "dropme")
	g := c.tableGroup("dropme")
	lag, lagFS := c.leaveBehind("dropme", 3)
	var others []*testNode // read by the fetch hook, while the test starts the lagging node
	for _, tn := range c.nodes {
		others = append(others, tn)
	}
	release := make(chan struct{})
	var once sync.Once
	c.prepare = func(tn *testNode) {
		if tn.id != lag.id {
			return
		}
		inner := tn.node.cfg.FetchSnapshot
		node := tn.node
		tn.node.cfg.FetchSnapshot = func(ctx context.Context, from uint64, token []byte) (io.ReadCloser, error) {
			rc, err := inner(ctx, from, token)
			once.Do(func() {
				// Stall the lagging node's apply goroutine (a slow disk).
				go node.onApply(func() error { <-release; return nil })
				time.Sleep(50 * time.Millisecond)
				for _, tn := range others {
					if err := tn.node.Store().DeleteTable(context.Background(), acct, "dropme"); err == nil {
						break
					}
				}
				time.Sleep(300 * time.Millisecond) // the drop commits on the lagging node too
				go func() { time.Sleep(500 * time.Millisecond); close(release) }()
			})
			return rc, err
		}
	}
	back := c.start(lag.id, lagFS)
	c.prepare = nil
	// Done when the node has dropped the group, still running.
	for deadline := time.Now().Add(10 * time.Second); back.node.testGroup(g.ID) != nil && back.node.Err() == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("node %d still hosts group %d, the table dropped", back.id, g.ID)
		}
	}
	if err := back.node.Err(); err != nil {
		t.Fatalf("group %d: node %d stopped: %v", g.ID, back.id, err)
	}
}
