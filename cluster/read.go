package cluster

import (
	"cmp"
	"context"
	"encoding/binary"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
)

// readWaiter is a read waiting for the index it may be answered at.
type readWaiter struct {
	r    *replica
	done chan readIndex // buffered
}

type readIndex struct {
	index uint64
	err   error
}

// readBarrier returns once this node may answer a linearizable read: it
// is the leader (confirmed by a quorum after the read began: raft's
// ReadIndex, or its lease) and has applied everything committed before.
// A read in the first half of a lease returns at once (leaseCovers);
// others go through the loop, where concurrent reads share one round.
func (r *replica) readBarrier(ctx context.Context) error {
	if err := r.refuseRequest(); err != nil {
		return err
	}
	// ready is read again after the view: a view found is then never of
	// a later term than the ready flag read.
	if r.leaseCovers(time.Now()) && r.ready.Load() {
		return nil
	}
	n := r.n
	rw := &readWaiter{r: r, done: make(chan readIndex, 1)}
	select {
	case n.reads <- rw:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopped:
		return errStoppedUnwritten
	}
	var ri readIndex
	select {
	case ri = <-rw.done:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopped:
		return errStoppedUnwritten
	}
	if ri.err != nil {
		return ri.err
	}
	return r.waitApplied(ctx, ri.index)
}

// requestReads asks each group of the reads for one read index for all of
// its reads.
func (n *Node) requestReads(reads []*readWaiter) {
	slices.SortStableFunc(reads, func(a, b *readWaiter) int { return cmp.Compare(a.r.group, b.r.group) })
	for i := 0; i < len(reads); {
		r := reads[i].r
		j := i + 1
		for j < len(reads) && reads[j].r == r {
			j++
		}
		r.requestRead(reads[i:j:j])
		i = j
	}
}

// requestRead answers a batch of reads from the leader's lease if it
// holds one, and otherwise asks raft for one read index for the batch.
func (r *replica) requestRead(batch []*readWaiter) {
	if !r.ready.Load() {
		err := r.notReady()
		for _, rw := range batch {
			rw.done <- readIndex{err: err}
		}
		return
	}
	now := time.Now()
	if commit, ok := r.lease.holds(r, now); ok {
		for _, rw := range batch {
			rw.done <- readIndex{index: commit}
		}
		if !r.lease.renewing && r.lease.until.Sub(now) < r.n.leaseDuration()/2 {
			r.lease.renewing = true
			r.startReadRound(nil, now)
		}
		return
	}
	r.startReadRound(batch, now)
}

// startReadRound asks raft for a read index for batch (none: a round that
// only renews the lease), which readDone hands over.
func (r *replica) startReadRound(batch []*readWaiter, now time.Time) {
	r.quiesced.Store(false)
	rn := r.rawNode()
	r.readSeq++
	r.n.readRounds.Add(1)
	key := binary.BigEndian.AppendUint64(nil, r.readSeq)
	if r.readsByCtx == nil {
		r.readsByCtx = make(map[string]readRound) // a leader's, at its first read round
	}
	r.readsByCtx[string(key)] = readRound{batch: batch, began: now, beganTick: r.n.live.ticks,
		term: rn.BasicStatus().HardState.GetTerm()}
	rn.ReadIndex(key)
	r.n.touch(r)
}

// readDone hands a confirmed read index to its batch, and extends the
// lease: a quorum heard from this leader after the round began.
func (r *replica) readDone(rs raft.ReadState) {
	if r.heardCatchUp(rs.RequestCtx, rs.Index) {
		return
	}
	round, ok := r.readsByCtx[string(rs.RequestCtx)]
	if !ok {
		return
	}
	delete(r.readsByCtx, string(rs.RequestCtx))
	r.lease.granted(r, round)
	for _, rw := range round.batch {
		rw.done <- readIndex{index: rs.Index}
	}
}

// failReads ends the reads waiting for an index, when leadership is lost:
// raft drops their requests.
func (r *replica) failReads(err error) {
	r.dropLease()
	for k, round := range r.readsByCtx {
		for _, rw := range round.batch {
			rw.done <- readIndex{err: err}
		}
		delete(r.readsByCtx, k)
	}
}

// readRound is a ReadIndex request in flight: the reads waiting for it,
// and when (in the node's wall clock and ticks) and in which term it
// began.
type readRound struct {
	batch     []*readWaiter
	began     time.Time
	beganTick uint64
	term      uint64
}

// readLease lets a leader answer reads at its commit index with no round
// to its followers, for a while after a quorum last confirmed it.
//
// Why it is safe: a follower that hears from its leader refuses to vote
// for another candidate for an election timeout of its own ticks after
// (raft's CheckQuorum), and calls no election of its own before then. A
// read round that began at time t and completed means a quorum heard from
// this leader after t, so no other leader can be elected before t plus
// an election timeout: ElectionTicks ticks, the first of which may come
// at once. The lease ends two ticks short of that, measured both on the
// monotonic wall clock (a leader whose loop stalled must not count its
// missing ticks as time not passed) and in the node's ticks (a test's
// clock may run faster than the wall's). Three things would break the
// followers' side, and are kept from it: a leadership transfer, whose
// target campaigns at once (a leader hands its lease over only after
// dropping its lease, and no lease holds while raft has a transfer under
// way); a follower that restarted and so forgot its leader (a replica
// that had state before it started neither votes nor stands for election
// on this node's word for an election timeout: voteAfter); and a
// follower told to campaign by this node (the same guard).
type readLease struct {
	term      uint64
	until     time.Time
	untilTick uint64
	renewing  bool // a round that only renews it is in flight
	// voidBefore: rounds that began before it grant nothing (a transfer
	// was asked for then).
	voidBefore time.Time
}

// leaseDuration is how long a read round's confirmation lets the leader
// answer reads by itself; 0 when the election timeout is too short for one.
func (n *Node) leaseDuration() time.Duration {
	if n.cfg.ElectionTicks <= 2 {
		return 0
	}
	return time.Duration(n.cfg.ElectionTicks-2) * n.cfg.TickInterval
}

// holds reports whether the leader r may answer a read at now from its
// lease, and if so at which index: its commit index.
func (l *readLease) holds(r *replica, now time.Time) (commit uint64, ok bool) {
	if l.term == 0 || !now.Before(l.until) || r.n.live.ticks >= l.untilTick || r.handingOver.Load() {
		return 0, false
	}
	st := r.rawNode().BasicStatus()
	ok = st.RaftState == raft.StateLeader && st.HardState.GetTerm() == l.term && st.LeadTransferee == 0
	return st.HardState.GetCommit(), ok
}

// granted extends the lease by a completed round.
func (l *readLease) granted(r *replica, round readRound) {
	if round.batch == nil {
		l.renewing = false
	}
	d := r.n.leaseDuration()
	if d == 0 || round.began.Before(l.voidBefore) {
		return
	}
	st := r.rawNode().BasicStatus()
	if st.RaftState != raft.StateLeader || st.HardState.GetTerm() != round.term || st.LeadTransferee != 0 {
		return
	}
	if until := round.began.Add(d); l.term != round.term || until.After(l.until) {
		l.term, l.until = round.term, until
		l.untilTick = round.beganTick + uint64(r.n.cfg.ElectionTicks-2)
		r.publishLease()
	}
}

// voidLease ends the lease, and keeps rounds under way from granting
// one: the leader is about to ask raft to transfer its leadership.
func (r *replica) voidLease() {
	r.leaseView.Store(nil)
	r.lease = readLease{voidBefore: time.Now()}
}

// dropLease ends the lease: the replica no longer leads, or dozes.
func (r *replica) dropLease() {
	r.leaseView.Store(nil)
	r.lease = readLease{}
}

// A read the lease covers needs nothing of the loop, so reads of a range
// under writes no longer wait behind the loop's raft log writes: the
// loop publishes the first half of each lease it is granted (leaseView),
// and a read begun within it is answered from the replica's state as it
// is. That is linearizable, as a read at the commit index is: the
// replica is ready (refuseRequest), so it applied every entry of the
// terms before its own; a write it acknowledged was applied before its
// answer; and no other leader can have acknowledged anything while the
// lease holds. The view is cleared before the loop asks raft for a
// transfer and when the replica stops leading, so a read that found it
// began before either. The second half is left to the loop, which
// answers from the lease too and renews it (requestRead): a read there
// takes the loop's turn, and its renewal extends the view.

// leaseView is the part of a lease the request goroutines read.
type leaseView struct {
	until     time.Time // on the monotonic wall clock
	untilTick uint64    // in the node's ticks (Node.tickCount)
}

// publishLease publishes the first half of the lease granted just now
// for the request goroutines.
func (r *replica) publishLease() {
	l, n := &r.lease, r.n
	halfTicks := uint64(n.cfg.ElectionTicks-2) / 2 // granted: ElectionTicks > 2
	r.leaseView.Store(&leaseView{until: l.until.Add(-n.leaseDuration() / 2), untilTick: l.untilTick - halfTicks})
}

// leaseCovers says whether a read begun at now is covered by the lease's
// first half, and so answered from the replica's state without the loop.
func (r *replica) leaseCovers(now time.Time) bool {
	v := r.leaseView.Load()
	return v != nil && now.Before(v.until) && r.n.tickCount.Load() < v.untilTick
}
