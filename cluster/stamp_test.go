package cluster

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tabuladb/tabula/cluster/command"
	"github.com/tabuladb/tabula/partition"
)

// The tests of this file hold the cluster to its promise on commit
// timestamps (ETags): per entity they only go forward, whoever stamps
// them, and no stamp can stop a replica.

// TestStampsAfterRestartWithAClockBehind: the nodes write an entity while
// their clocks run an hour ahead, then all restart cleanly with the clock
// right. The new leader has applied nothing since its start, so it
// stamps from its clock alone, below the entity's timestamp; the update
// must still commit, past the old timestamp, on every replica alike.
func TestStampsAfterRestartWithAClockBehind(t *testing.T) {
	c := newTestCluster(t, 3, 21)
	ctx := context.Background()
	c.clock = func() time.Time { return time.Now().Add(time.Hour) }
	c.restartAll()
	s := c.leader(10 * time.Second).node.Store()
	if _, err := s.CreateTable(ctx, acct, "clock"); err != nil {
		t.Fatal(err)
	}
	before, err := s.Apply(ctx, acct, "clock", partition.Op{Kind: partition.OpInsertOrReplace, Entity: ent("p", "x", 1)})
	if err != nil {
		t.Fatal(err)
	}
	c.converge(10 * time.Second)

	c.clock = nil
	c.restartAll()
	after, err := c.leader(10*time.Second).node.Store().Apply(ctx, acct, "clock", partition.Op{Kind: partition.OpInsertOrReplace, Entity: ent("p", "x", 2)})
	if err != nil {
		t.Fatalf("the update after the restart: %v", err)
	}
	if after.Timestamp <= before.Timestamp {
		t.Fatalf("the entity's timestamp went from %d to %d", before.Timestamp, after.Timestamp)
	}
	c.converge(10 * time.Second)
	for id, tn := range c.nodes {
		if err := tn.node.Err(); err != nil {
			t.Fatalf("node %d stopped: %v", id, err)
		}
	}
}

// TestDeposedLeaderForwardsNoStampedProposal: a leader stalls, cut off,
// while the others elect another; it comes back with proposals queued and
// the new leader's heartbeats in its inbox, and one loop turn steps both.
// Having stepped down it must not hand its stamped proposals on to the
// new leader (raft would forward them), whose stamps they were never
// ordered against: they are refused, and nothing of theirs enters a
// later term of the log.
func TestDeposedLeaderForwardsNoStampedProposal(t *testing.T) {
	c := newTestCluster(t, 3, 11)
	ctx := context.Background()
	old := c.leader(10 * time.Second)
	if _, err := old.node.Store().CreateTable(ctx, acct, "fwd"); err != nil {
		t.Fatal(err)
	}
	var oldTerm uint64
	for deadline := time.Now().Add(10 * time.Second); oldTerm == 0; time.Sleep(5 * time.Millisecond) {
		if st := old.node.Status(); st.Leader == old.id {
			oldTerm = st.Term // as of the node's last tick
		}
		if time.Now().After(deadline) {
			t.Fatal("the leader's status never showed its term")
		}
	}
	ld := c.stallAndCutOff(old)

	release := c.net.hold(old.id)
	var wg sync.WaitGroup
	write := func() {
		wg.Go(func() {
			old.node.Store().Apply(ctx, acct, "fwd", partition.Op{Kind: partition.OpInsertOrReplace, Entity: ent("p", "k", 1)})
		})
	}
	write()
	time.Sleep(20 * time.Millisecond) // its loop now waits in Send
	for range 64 {
		write()
	}
	time.Sleep(20 * time.Millisecond)
	c.net.heal()
	time.Sleep(60 * time.Millisecond) // the new leader's heartbeats queue in its inbox
	release()
	wg.Wait()
	old.paused.Store(false)
	c.converge(10 * time.Second)

	first, err := ld.node.rlog.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	last, err := ld.node.rlog.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	ents, err := ld.node.rlog.Entries(first, last+1, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.GetTerm() <= oldTerm || e.GetType() != 0 || len(e.GetData()) == 0 {
			continue
		}
		if cmd, err := command.Decode(e.GetData()); err == nil && cmd.ID>>48 == old.id {
			t.Fatalf("entry %d of term %d (the old leader's was %d) was proposed by the old leader, node %d", e.GetIndex(), e.GetTerm(), oldTerm, old.id)
		}
	}
	for id, tn := range c.nodes {
		if err := tn.node.Err(); err != nil {
			t.Fatalf("node %d stopped: %v", id, err)
		}
	}
}
