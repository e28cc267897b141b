package cluster

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Dormant replicas: an idle group's replicas give up their raft state.
//
// A quiesced replica is not ticked, but it still holds its RawNode: the
// raft state machine, its progress tracker and configuration, its log's
// cursors, about two thirds of what an idle replica keeps in memory
// (BenchmarkIdleRangeGroups). A replica quiesced for dozeElections
// election timeouts with nothing in flight drops it: everything it has
// is in its raft log and store (hard state, entries, applied index).
//
// A follower started again from them is the same follower, less the
// leader it knew (the replica's own record of it, leader, stays:
// mustWake, standForLostLeader and routing read it) and the ticks since
// it last heard from it. Raft needs those for the leader's read lease
// (readLease): a follower that forgot its leader votes for another
// candidate at once. So one woken from dormancy neither votes nor stands
// until an election timeout has passed since its node last heard from
// the leader's, as a restarted one waits (voteAfter), but for the leader
// it knew: its vote can count in no other leader's lease, for it has
// heard from no other since it last acknowledged that one.
//
// A leader gives up its lease with its raft state (it stops answering as
// the leader first: ready is cleared), but not its place: it stays the
// group's leader as every replica records it, so requests are still
// routed to it, and they wake it (askWake). Raft started again is a
// follower, so a dormant leader woken stands at once, in the next term,
// as a leader transfer's target does (reelect): without pre-vote, and
// with the transfer's mark, which raft's followers grant past their own
// lease of the leader they know (the candidate is that leader). The
// first request waits for that election, a round trip and its fsyncs,
// repeated by the front end meanwhile (http_repeat.go). The election is
// safe however stale the dormant leader is: it last led term T and has
// stepped nothing since (any message wakes it), so it stands in T+1, and
// any leader elected after it holds a term of T+1 or later from a quorum
// that voted for it there, which the candidate's quorum meets. A dormant
// leader whose lease is to go to even the nodes' lease counts out is woken
// to hand it over, and stays awake until the balancer's next look.
//
// The loop wakes a dormant replica wherever it needs its raft state
// (rawNode): a message of its group, a wake by liveness, a host change,
// a request to a dormant leader.

// dozeElections is how many election timeouts a replica stays quiesced
// before it drops its raft state: a group quiesced and woken often keeps
// it.
const dozeElections = 2

// maybeDoze drops the raft state of a quiesced replica that has been
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
	if r.group == systemGroup || r.install != nil || r.handover.to != 0 || len(r.readsByCtx) > 0 || r.rn.HasReady() {
		return
	}
	st := r.rn.BasicStatus()
	// Everything committed is applied: a RawNode started again from the
	// store's applied index hands nothing to the apply goroutine twice.
	if r.applied.Load() != st.GetCommit() {
		return
	}
	switch {
	case st.RaftState == raft.StateFollower && st.Lead != raft.None:
	case st.RaftState == raft.StateLeader && r.ready.Load() && !r.waiters.hasOrphans.Load():
		if r.wokenForLease != 0 && r.n.live.ticks-r.wokenForLease < 2*leaseBalanceElections*uint64(r.n.cfg.ElectionTicks) {
			return // woken to hand its lease over at the next look (balanceLeases)
		}
		// A leader's log is all committed (maybeQuiesce): nothing it
		// stood for is lost with its progress tracker.
		if last, err := r.rlog.LastIndex(); err != nil || last != st.GetCommit() {
			return
		}
		r.leaderMu.Lock()
		r.isLeader = false
		r.ready.Store(false)
		r.dropLease()
		r.wakeAsked.Store(false)
		r.dormantLeader.Store(true)
		r.leaderMu.Unlock()
	default:
		return
	}
	r.rn = nil
	r.readsByCtx = nil // empty: its buckets go
	r.campaignLeft = 0 // its group has a leader: see campaign
}

// rawNode returns the replica's raft state machine, waking it from
// dormancy: started again from its storage, as a follower that neither
// votes nor stands while the leader it knew may hold a read lease that
// counts on its vote, or as a dormant leader that stands at once.
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
	r.quietTicks = 0
	if r.dormantLeader.Load() {
		r.reelect()
		return rn
	}
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
	return rn
}

// reelect makes a dormant leader just woken stand in the next term, as a
// leader transfer's target: raft's MsgTimeoutNow, which only names the
// replica, stepped by the replica itself.
func (r *replica) reelect() {
	r.dormantLeader.Store(false)
	r.wakeAsked.Store(false)
	r.quiesced.Store(false) // the election times out by ticks
	r.reelectUntil = r.n.live.ticks + uint64(r.n.cfg.ElectionTicks)
	term := r.rn.BasicStatus().GetTerm()
	// Refused only by a replica that may not stand (a learner, or one
	// removed from the group): then raft's own timers or the group's
	// other members elect.
	_ = r.rn.Step(&raftpb.Message{Type: raftpb.MessageType_MsgTimeoutNow.Enum(),
		From: proto.Uint64(r.id), To: proto.Uint64(r.id), Term: proto.Uint64(term)})
	r.n.touch(r)
	r.n.log.Info("cluster: dormant leader woken, standing again", "node", r.n.cfg.ID, "group", r.group, "term", term+1)
}

// askWake asks the loop, from a request's goroutine, to wake the replica
// if it is a dormant leader, and returns the refusal for the request
// meanwhile (nil if it is not dormant): the front end repeats it.
func (r *replica) askWake() error {
	if !r.dormantLeader.Load() {
		return nil
	}
	if r.wakeAsked.CompareAndSwap(false, true) {
		n := r.n
		wake := func() {
			if n.replicas[r.group] == r && r.dormant() {
				r.rawNode()
			}
			r.wakeAsked.Store(false)
		}
		select {
		case n.calls <- wake:
		default:
			r.wakeAsked.Store(false) // the loop is busy: the repeat asks again
		}
	}
	return errMoved(fmt.Sprintf("the leader of group %d is waking from dormancy", r.group))
}

// notReady is the refusal of a request that finds the replica not the
// ready leader; one that finds it a dormant leader wakes it.
func (r *replica) notReady() error {
	if err := r.askWake(); err != nil {
		return err
	}
	return errNotLeader(r.leader.Load())
}

// awaitWake wakes the replica if it is a dormant leader, and reports
// whether it is then the ready leader, within ctx.
func (r *replica) awaitWake(ctx context.Context) bool {
	if r.askWake() == nil {
		return r.ready.Load() // not dormant
	}
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	for !r.ready.Load() {
		if lead := r.leader.Load(); lead != 0 && lead != r.n.cfg.ID {
			return false // another was elected
		}
		select {
		case <-poll.C:
			r.askWake()
		case <-ctx.Done():
			return false
		case <-r.n.stopped:
			return false
		}
	}
	return true
}

// dormant reports whether the replica has dropped its raft state.
func (r *replica) dormant() bool { return r.rn == nil }
