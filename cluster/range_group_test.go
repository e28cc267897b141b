package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tabuladb/tabula/internal/svcerr"
	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
)

// isBusy says whether err is 503 ServerBusy: leadership or a lease
// moving, which the cluster's tests wait out by asking again.
func isBusy(err error) bool {
	var se *svcerr.Error
	return errors.As(err, &se) && se.Code == "ServerBusy"
}

// groupLeader waits for a ready leader of range group g, or a dormant one
// (which a request wakes), and returns it.
func (c *testCluster) groupLeader(g uint64, timeout time.Duration) *testNode {
	c.t.Helper()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, tn := range c.nodes {
			if r := tn.node.testGroup(g); r != nil && r.holdsLease() {
				return tn
			}
			if u, ok := tn.node.unloadedReplica(g); ok && u.dormantLeader {
				return tn
			}
		}
	}
	c.t.Fatalf("group %d: no ready leader in %v", g, timeout)
	return nil
}

// moveLease hands the lease of range group g (of table, its range
// holding pk) to node to, asking whichever node leads it, again while
// the answer is ServerBusy (raft gave a transfer up, as on a loaded
// machine) or ErrNotLeaseholder (an election moved the lease meanwhile).
func (c *testCluster) moveLease(g uint64, table, pk string, to *testNode) {
	c.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ld := c.groupLeader(g, 10*time.Second)
		if ld == to {
			return
		}
		_, err := ld.node.TransferLease(context.Background(), acct, table, pk, to.id)
		if err == nil {
			return
		}
		if !isBusy(err) && !errors.Is(err, ErrNotLeaseholder) || time.Now().After(deadline) {
			c.t.Fatalf("hand group %d's lease to node %d: %v", g, to.id, err)
		}
	}
}

// writeInGroup writes entity (pk, rk) = n through range group g's leader,
// retrying while leadership moves.
func (c *testCluster) writeInGroup(g uint64, pk, rk string, n int) partition.StoredEntity {
	c.t.Helper()
	return c.inGroup(g, "write "+pk+"/"+rk, func(ld *testNode) (partition.StoredEntity, error) {
		return ld.node.applyInGroup(context.Background(), g, acct, "ranges", partition.Op{Kind: partition.OpInsertOrReplace, Entity: ent(pk, rk, n)})
	})
}

// readInGroup reads entity (pk, rk) through range group g's leader,
// retrying while its lease moves (a node hands over the leases of busy
// groups it leads, and answers ServerBusy while it does).
func (c *testCluster) readInGroup(g uint64, pk, rk string) partition.StoredEntity {
	c.t.Helper()
	return c.inGroup(g, "read "+pk+"/"+rk, func(ld *testNode) (partition.StoredEntity, error) {
		return ld.node.getInGroup(context.Background(), g, acct, "ranges", pk, rk)
	})
}

// inGroup runs op on range group g's leader until it is not refused with
// ServerBusy (leadership or the lease moving), failing the test on any
// other error.
func (c *testCluster) inGroup(g uint64, what string, op func(ld *testNode) (partition.StoredEntity, error)) partition.StoredEntity {
	c.t.Helper()
	for range 200 {
		e, err := op(c.groupLeader(g, 10*time.Second))
		if isBusy(err) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			c.t.Fatalf("group %d: %s: %v", g, what, err)
		}
		return e
	}
	c.t.Fatalf("group %d: %s: no leader took it", g, what)
	return partition.StoredEntity{}
}

// waitQuiesced waits until every replica of every range group on the
// running nodes is quiesced.
func (c *testCluster) waitQuiesced(timeout time.Duration) {
	c.t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(10 * time.Millisecond) {
		awake := 0
		for _, tn := range c.nodes {
			for _, g := range c.groups {
				if !tn.node.quiescedHere(g) {
					awake++
				}
			}
		}
		if awake == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%d range replicas still awake after %v", awake, timeout)
		}
	}
}

// createRangesTable creates the table the range groups write to, and
// waits until every node has it: a range group's command checks the
// table in the applying replica's store, and the system group that
// creates it is another log (ordering the two is for the range
// descriptors still to come).
func (c *testCluster) createRangesTable() {
	c.t.Helper()
	if _, err := retryLeader(c, func(s *Store) (partition.StoredEntity, error) {
		_, err := s.CreateTable(context.Background(), acct, "ranges")
		return partition.StoredEntity{}, err
	}); err != nil {
		c.t.Fatal(err)
	}
	c.converge(10 * time.Second)
}

// TestRangeGroupsReplicate writes through eight range groups beside the
// system group: every node's store ends with every write, each group's
// leader reads its writes back linearizably, the groups quiesce once
// idle, a write wakes its group and is taken, and a restarted node comes
// back with every group where its store left it.
func TestRangeGroupsReplicate(t *testing.T) {
	c := newRangeCluster(t, 3, 11, 8)
	c.createRangesTable()
	want := map[string]int{}
	for _, g := range c.groups {
		for i := range 10 {
			pk, rk := fmt.Sprintf("g%d", g), fmt.Sprintf("r%02d", i)
			c.writeInGroup(g, pk, rk, int(g)*100+i)
			want[pk+"/"+rk] = int(g)*100 + i
		}
	}
	for _, g := range c.groups {
		e := c.readInGroup(g, fmt.Sprintf("g%d", g), "r09")
		if n := entityN(t, e); n != int(g)*100+9 {
			t.Fatalf("group %d: read N=%d, want %d", g, n, int(g)*100+9)
		}
	}

	c.waitQuiesced(10 * time.Second)
	ticks := func() (n int) {
		for _, tn := range c.nodes {
			for _, g := range c.groups {
				if !tn.node.quiescedHere(g) {
					n++
				}
			}
		}
		return n
	}
	if awake := ticks(); awake != 0 {
		t.Fatalf("%d replicas awake after quiescing", awake)
	}
	// A write wakes its group; the group quiesces again afterwards.
	c.writeInGroup(5, "g5", "late", 5555)
	want["g5/late"] = 5555
	c.waitQuiesced(10 * time.Second)

	// Every node holds every write of every group.
	c.waitStores(want, 10*time.Second)

	// A restart: the node takes each group up from the index its store
	// applied for that group. (After a crash a replica replays its range
	// groups' logs, and the system group's, from those indexes, in no set
	// order between groups: a range command can then meet a catalog that
	// has not replayed its table yet. Range descriptors in the system
	// group, still to come, remove that dependency; docs/cluster.md.)
	fs := c.nodes[2].fs
	c.stop(2)
	c.start(2, fs)
	c.writeInGroup(3, "g3", "after", 3333)
	want["g3/after"] = 3333
	c.waitStores(want, 10*time.Second)
}

// TestQuiescedGroupsElectWhenTheirLeaderDies quiesces range groups, then
// kills the node that leads some of them: their followers, which no
// heartbeat reaches in a quiesced group, learn from the node's silence
// that it is gone, elect new leaders, and take writes.
func TestQuiescedGroupsElectWhenTheirLeaderDies(t *testing.T) {
	c := newRangeCluster(t, 3, 12, 6)
	c.createRangesTable()
	for _, g := range c.groups {
		c.writeInGroup(g, fmt.Sprintf("g%d", g), "first", int(g))
	}
	c.waitQuiesced(10 * time.Second)
	victim, led := c.crashBusiestLeader()
	for _, g := range led {
		c.writeInGroup(g, fmt.Sprintf("g%d", g), "second", int(g)+1000)
		if ld := c.groupLeader(g, time.Second); ld.id == victim {
			t.Fatalf("group %d is led by the dead node", g)
		}
	}
	want := map[string]int{}
	for _, g := range c.groups {
		want[fmt.Sprintf("g%d/first", g)] = int(g)
	}
	for _, g := range led {
		want[fmt.Sprintf("g%d/second", g)] = int(g) + 1000
	}
	c.waitStores(want, 10*time.Second)
}

// crashBusiestLeader crashes the node that leads the most range groups,
// and returns it and the groups it led.
func (c *testCluster) crashBusiestLeader() (uint64, []uint64) {
	c.t.Helper()
	victim, led := c.busiestLeader()
	c.crash(victim, nil)
	return victim, led
}

// busiestLeader returns the node that leads the most range groups, and
// the groups it leads.
func (c *testCluster) busiestLeader() (uint64, []uint64) {
	c.t.Helper()
	led := map[uint64][]uint64{}
	for _, g := range c.groups {
		ld := c.groupLeader(g, time.Second)
		led[ld.id] = append(led[ld.id], g)
	}
	var victim uint64
	for id, gs := range led {
		if len(gs) > len(led[victim]) {
			victim = id
		}
	}
	return victim, led[victim]
}

// waitStores waits until every running node's store holds exactly want
// (pk/rk -> N) in the ranges table.
func (c *testCluster) waitStores(want map[string]int, timeout time.Duration) {
	c.t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(10 * time.Millisecond) {
		bad := ""
		for _, tn := range c.nodes {
			got := map[string]int{}
			page, _, err := tn.node.Replica().QueryEntitiesPage(context.Background(), acct, "ranges", partition.EntityQuery{})
			if err != nil {
				c.t.Fatal(err)
			}
			for _, e := range page {
				got[e.PartitionKey+"/"+e.RowKey] = entityN(c.t, e)
			}
			if len(got) != len(want) {
				bad = fmt.Sprintf("node %d holds %d entities, want %d", tn.id, len(got), len(want))
				break
			}
			for k, n := range want {
				if got[k] != n {
					bad = fmt.Sprintf("node %d: %s = %d, want %d", tn.id, k, got[k], n)
					break
				}
			}
		}
		if bad == "" {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatal(bad)
		}
	}
}

// entityN decodes a stored entity's N property.
func entityN(t testing.TB, e partition.StoredEntity) int {
	t.Helper()
	var ent odata.Entity
	if err := odata.DecodeEntityBinary(e.Value, &ent); err != nil {
		t.Fatal(err)
	}
	v, _ := ent.Get("N")
	return int(v.Int32())
}

// TestTablelessGroupsOutliveASystemSnapshot: a node that catches up on
// the system group by a snapshot of the leader's store keeps the range
// groups it hosts without a table (the tests' groups), which the
// snapshot's catalog cannot name. It dropped them: their other members,
// quiesced under the dropped leader, waited for it for good (the idle
// groups' benchmark, 10,000 groups after 1,000).
func TestTablelessGroupsOutliveASystemSnapshot(t *testing.T) {
	c := newRangeCluster(t, 3, 13, 4)
	c.createRangesTable()
	want := map[string]int{}
	for _, g := range c.groups {
		c.writeInGroup(g, fmt.Sprintf("g%d", g), "first", int(g))
		want[fmt.Sprintf("g%d/first", g)] = int(g)
	}
	// Every node applies the writes before one crashes. A group without
	// a table (this test mode) writes into tables that the system
	// snapshot brings. A snapshot from a node that had not applied a
	// write yet (a follower of that group, told of the commit late) would
	// replace the restarted node's copy of it, which that node's group
	// had applied again from its own log and, applied past it, would not
	// write again. Range groups of tables of their own are carried across
	// a system snapshot (carryRangeGroups) and have no such limit.
	c.waitStores(want, 10*time.Second)
	ld := c.leader(10 * time.Second)
	lag := c.follower(ld)
	disk := c.crash(lag, nil)
	ctx := context.Background()
	if _, err := ld.node.Store().CreateTable(ctx, acct, "snap"); err != nil {
		t.Fatal(err)
	}
	for i := range 300 { // ten times LogRetention
		if _, err := ld.node.Store().Apply(ctx, acct, "snap", partition.Op{Kind: partition.OpInsert, Entity: ent("p", fmt.Sprintf("r%03d", i), i)}); err != nil {
			t.Fatal(err)
		}
	}
	tn := c.start(lag, disk)
	c.converge(20 * time.Second)
	if st := tn.node.Status(); st.SnapshotsInstalled == 0 {
		t.Fatalf("the lagging node caught up without a snapshot: %+v", st.Status)
	}
	for _, g := range c.groups {
		if tn.node.testGroup(g) == nil {
			t.Fatalf("node %d dropped range group %d on the system snapshot", lag, g)
		}
		c.writeInGroup(g, fmt.Sprintf("g%d", g), "second", int(g)+100)
		want[fmt.Sprintf("g%d/second", g)] = int(g) + 100
	}
	c.waitStores(want, 10*time.Second)
}
