package cluster

import (
	"go.etcd.io/raft/v3"
)

// Dormant replicas: an idle group's follower gives up its raft state.
//
// A quiesced replica is not ticked, but it still holds its RawNode: the
// raft state machine, its progress tracker and configuration, its log's
// cursors, about two thirds of what an idle replica keeps in memory
// (BenchmarkIdleRangeGroups). A follower quiesced for dozeElections
// election timeouts with nothing in flight drops it: everything it has
// is in its raft log and store (hard state, entries, applied index), and
// a RawNode started again from them is the same follower, less the
// leader it knew (the replica's own record of it, leader, stays: mustWake,
// standForLostLeader and routing read it) and the ticks since it last
// heard from it. Raft needs those for the leader's read lease
// (readLease): a follower that forgot its leader votes for another
// candidate at once. So one woken from dormancy neither votes nor stands
// until an election timeout has passed since its node last heard from
// the leader's, as a restarted one waits (voteAfter). The leader keeps
// its state: a leader started again would be a follower, and its group
// would need an election before the next request.
//
// The loop wakes a dormant replica wherever it needs its raft state
// (rawNode): a message of its group, a wake by liveness, a host change.

// dozeElections is how many election timeouts a follower stays quiesced
// before it drops its raft state: a group quiesced and woken often keeps
// it.
const dozeElections = 2

// maybeDoze drops the raft state of a quiesced follower that has been
// quiet for dozeElections election timeouts and has nothing in flight.
func (r *replica) maybeDoze() {
	if r.rn == nil {
		return
	}
	doze := dozeElections * r.n.cfg.ElectionTicks
	if r.n.dozeTicks != 0 {
		doze = r.n.dozeTicks
	}
	if r.quietTicks++; r.quietTicks < doze {
		return
	}
	if r.group == systemGroup || r.isLeader || r.install != nil || r.handover.to != 0 || len(r.readsByCtx) > 0 || r.rn.HasReady() {
		return
	}
	st := r.rn.BasicStatus()
	// Everything committed is applied: a RawNode started again from the
	// store's applied index hands nothing to the apply goroutine twice.
	if st.RaftState != raft.StateFollower || st.Lead == raft.None || r.applied.Load() != st.GetCommit() {
		return
	}
	r.rn = nil
	r.readsByCtx = nil // empty: its buckets go
	r.campaignLeft = 0 // its group has a leader: see campaign
}

// rawNode returns the replica's raft state machine, waking it from
// dormancy: started again from its storage, as a follower that neither
// votes nor stands while the leader it knew may hold a read lease that
// counts on its vote.
func (r *replica) rawNode() *raft.RawNode {
	if r.rn != nil {
		return r.rn
	}
	rn, err := r.newRawNode(r.applied.Load())
	if err != nil {
		// The configuration was validated when the replica started, and
		// raft reads its storage's failures as panics of its own.
		panic(err)
	}
	r.rn = rn
	r.n.dormantWakes.Add(1)
	// Raft's follower refuses votes for an election timeout after it
	// last heard from its leader; the node's last word from the leader's
	// node is no earlier than that. A replica woken because that node
	// fell silent (mustWake) may so vote, and stand (standForLostLeader),
	// at once.
	heard, ok := r.n.live.heard[r.leader.Load()]
	if !ok {
		heard = r.n.live.ticks
	}
	r.voteAfter = max(r.voteAfter, heard+uint64(r.n.cfg.ElectionTicks))
	r.quietTicks = 0
	return rn
}

// dormant reports whether the replica has dropped its raft state.
func (r *replica) dormant() bool { return r.rn == nil }
