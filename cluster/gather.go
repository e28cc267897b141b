package cluster

import (
	"sync/atomic"
	"time"
)

// Proposals gathered into one raft log write.
//
// A turn of the loop writes and fsyncs the raft log once for everything
// it proposes. Proposing as soon as anything is queued split a leader's
// clients into groups that alternated: the writes answered by one commit
// came back while the next write was already under way with the few that
// had arrived, and waited for the one after. Each fsync then carried a
// fraction of the clients, and every follower made an fsync for it too.
// Three nodes on one disk are bound by fsyncs, so small writes cost both
// throughput and CPU per entity (the write-ahead log's group commit met
// the same split: wal.Writer.gatherLocked).
//
// So the loop holds queued proposals back until as many have come as
// there were answers to this node's proposers since it last proposed
// (those clients are expected back), or for as long as the last synced
// write took, at most maxGather. A lone client is never held: its answer
// is the only one expected, and its next write is that one.

// maxGather caps a hold. Holding for half the last write's duration
// instead of all of it cost 11% of the cluster's insert throughput; twice
// it gained 4%, but held longer when fewer clients come back than were
// answered (clients that read next).
const maxGather = 2 * time.Millisecond

// proposalGather decides when the loop hands the proposals it holds to
// raft. answered is the apply goroutine's; the rest is the loop's.
type proposalGather struct {
	// answered counts the replies given to this node's proposers.
	answered atomic.Int64
	// answeredAtPropose is answered when the loop last proposed.
	answeredAtPropose int64
	// since is when the loop began to hold the proposals it holds (zero
	// when it holds none back).
	since time.Time
	// lastWrite is how long the last synced raft log write took; limit
	// caps a hold (maxGather; tests lengthen it).
	lastWrite, limit time.Duration
	// timer wakes the loop when the hold ends; armed says it runs.
	timer *time.Timer
	armed bool
}

func newProposalGather() *proposalGather {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &proposalGather{timer: t, limit: maxGather}
}

// hold returns how much longer the loop should hold queued proposals
// back, 0 (or less) if it should propose them now. The first call that
// holds starts the hold's clock; proposed stops it.
func (g *proposalGather) hold(queued int, now time.Time) time.Duration {
	expected := g.answered.Load() - g.answeredAtPropose
	if int64(queued) >= expected {
		return 0
	}
	if g.since.IsZero() {
		g.since = now
	}
	return min(g.lastWrite, g.limit) - now.Sub(g.since)
}

// wake returns the channel that wakes the loop when a hold ends: nil
// (never ready) when none runs.
func (g *proposalGather) wake() <-chan time.Time {
	if !g.armed {
		return nil
	}
	return g.timer.C
}

// arm has wake fire after d, unless it is armed already.
func (g *proposalGather) arm(d time.Duration) {
	if !g.armed {
		g.timer.Reset(d)
		g.armed = true
	}
}

// fired records that wake fired.
func (g *proposalGather) fired() { g.armed = false }

// proposed records that the loop proposed what it held.
func (g *proposalGather) proposed() {
	if g.armed {
		g.timer.Stop()
		g.armed = false
	}
	g.since = time.Time{}
	g.answeredAtPropose = g.answered.Load()
}
