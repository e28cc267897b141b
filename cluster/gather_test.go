package cluster

import (
	"context"
	"testing"
	"time"
)

// TestProposalGatherHold checks when the loop holds proposals back: only
// while fewer have come than this node's proposers were answered since it
// last proposed, and for at most the last synced write's duration, capped.
func TestProposalGatherHold(t *testing.T) {
	g := newProposalGather()
	t0 := time.Unix(1000, 0)

	if d := g.hold(1, t0); d != 0 {
		t.Fatalf("no write yet, nothing answered: held %v", d)
	}
	g.lastWrite = time.Millisecond
	if d := g.hold(1, t0); d != 0 {
		t.Fatalf("nothing answered since the last proposal (a lone or new client): held %v", d)
	}

	g.answered.Add(1)
	if d := g.hold(1, t0); d != 0 {
		t.Fatalf("the one client answered is back: held %v", d)
	}

	g.answered.Add(7) // eight answered since the last proposal
	if d := g.hold(3, t0); d != time.Millisecond {
		t.Fatalf("3 of 8 expected: held %v, want the last write's 1ms", d)
	}
	if d := g.hold(5, t0.Add(400*time.Microsecond)); d != 600*time.Microsecond {
		t.Fatalf("5 of 8, 400us into the hold: held %v more, want 600us", d)
	}
	if d := g.hold(5, t0.Add(time.Millisecond)); d > 0 {
		t.Fatalf("the hold is over: held %v more", d)
	}
	if d := g.hold(8, t0.Add(100*time.Microsecond)); d != 0 {
		t.Fatalf("every expected client came: held %v", d)
	}

	g.proposed()
	if d := g.hold(1, t0.Add(2*time.Millisecond)); d != 0 {
		t.Fatalf("after a proposal nothing is expected until answers come: held %v", d)
	}

	g.lastWrite = time.Second
	g.answered.Add(100)
	if d := g.hold(1, t0.Add(3*time.Millisecond)); d != maxGather {
		t.Fatalf("after a slow write: held %v, want the cap %v", d, maxGather)
	}
}

// TestHeldProposalIsProposedWhenTheHoldEnds has a leader's loop expect
// many writers back after a slow write, then sends one write alone: the
// loop holds it back for the whole hold, and must then propose it though
// nothing else wakes the loop (every node's raft clock stands still, so
// no tick or heartbeat does).
func TestHeldProposalIsProposedWhenTheHoldEnds(t *testing.T) {
	c, g, ld := newWrittenTable(t, 41, "held")

	for _, tn := range c.nodes {
		tn.paused.Store(true)
	}
	defer func() {
		for _, tn := range c.nodes {
			tn.paused.Store(false)
		}
	}()
	done := make(chan struct{})
	ld.node.calls <- func() {
		ld.node.gather.lastWrite = time.Second // held for maxGather
		ld.node.gather.answered.Add(1000)
		close(done)
	}
	<-done
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := ld.node.applyInGroup(ctx, g, acct, "held", opUpsert("p", "alone", 1)); err != nil {
		t.Fatalf("the held write: %v", err)
	}
	if took := time.Since(start); took < maxGather {
		t.Fatalf("the write took %v: it was not held (hold %v)", took, maxGather)
	}
}
