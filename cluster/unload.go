package cluster

import (
	"context"
	"fmt"
	"slices"

	"github.com/tabuladb/tabula/internal/shrink"
)

// Unloaded replicas: a replica dormant long enough leaves memory.
//
// A dormant replica (dormant.go) has dropped its raft state machine but
// still holds its replica struct, its raft log's in-memory state and its
// configuration: about a kilobyte and a half per group, so a node's
// memory grew with the number of ranges it hosts, idle or not. One
// dormant for unloadElections election timeouts more, with nothing of it
// held anywhere but its raft log and the store, is unloaded: the node
// keeps an unloadedReplica of it, a few dozen bytes in its raft log's
// engine (unload_record.go), and its raft log forgets the group's state
// (raftlog.Log.Unload).
//
// Anything that needs the replica loads it again (replicaOf on the loop,
// groupLoaded on other goroutines): a message of its group, a request, a
// host change, a wake by liveness, a lease to move, a warming (warm.go).
// A node also starts its idle groups' replicas unloaded, as cold records
// (startsUnloaded). Loaded, a replica unloaded is the dormant replica it
// was: started from its raft log and the store's
// applied index as a restart starts one, with what the record kept of
// what a restart loses: its own applied index (past the store's by the
// entries that write nothing), the leader it knew (routing, and the
// follower's guard of votes when it wakes: see rawNode), whether it was
// that leader (a dormant leader stands again when woken), and its stamp
// clock (the entities it stamped stay below the next stamps without a
// read of them).
//
// A group in the middle of anything (a proposal, a read, an install, a
// hand-over, a membership change, a split or merge the node waits on, a
// frozen span of its own) is not unloaded: only the plain state a
// restart rebuilds is dropped.

// unloadElections is how many election timeouts a replica stays dormant
// before it is unloaded: a group used now and then keeps its replica.
const unloadElections = 10

// unloadedReplica is what a node keeps of a replica it unloaded.
type unloadedReplica struct {
	leader uint64 // the group's leader's node, as it knew it
	// applied is the replica's applied index: the store's may be behind
	// it by entries that write nothing (a new leader's empty entry).
	applied              uint64
	lastStamp, appliedTS int64
	dormantLeader        bool
	tableless            bool // see replica.tableless
	votersBehind         bool // see replica.votersBehind
	// cold marks a replica the node started with unloaded
	// (hostTableGroups) and has not loaded since: it knows no leader,
	// and loads as a restart starts a replica, awake.
	cold bool
	// loading is set while replicaOf loads the replica again; moving
	// once its descriptor names other voters, until the loop loads it to
	// move its members (markMoving).
	loading, moving bool
}

// unloadWait is how many ticks a replica stays quiet before it is
// unloaded, or -1 if replicas are never unloaded.
func (n *Node) unloadWait() int {
	if n.unloadTicks != 0 {
		return n.unloadTicks
	}
	return (dozeElections + unloadElections) * n.cfg.ElectionTicks
}

// readyToUnload counts a tick of a dormant replica and says whether it
// has been quiet for unloadWait and can be unloaded. It runs on the loop.
func (r *replica) readyToUnload() bool {
	if !r.dormant() {
		return false
	}
	wait := r.n.unloadWait()
	if wait < 0 {
		return false
	}
	if r.quietTicks++; r.quietTicks < wait {
		return false
	}
	return r.unloadBlocker() == ""
}

// unloadBlocker names what keeps the replica from being unloaded: what
// it holds beyond its raft log, the store and an unloadedReplica ("" if
// nothing). A catch-up question answered is not kept: one asked again
// costs a round trip.
func (r *replica) unloadBlocker() string {
	n := r.n
	switch {
	case r.group == systemGroup:
		return "the system group"
	case !r.dormant():
		return "awake"
	case r.install != nil:
		return "a span install"
	case r.handover.to != 0 || r.handingOver.Load():
		return "a lease hand-over"
	case r.wakeAsked.Load():
		return "a wake asked" // by a request, which waits for it
	case len(r.readsByCtx) > 0:
		return "reads"
	case r.campaignLeft != 0:
		return "a campaign"
	case r.catchUp != nil && !r.catchUp.answered:
		return "a catch-up question"
	case r.members.proposed != (confMark{}) || r.members.mergeSince != 0:
		return "a membership change or merge it proposed"
	case len(r.notices.held) > 0 || r.notices.listed:
		return "commit notices"
	case !r.waiters.empty() || r.waiters.hasOrphans.Load():
		return "proposals"
	case hasKey(n.touched, r):
		return "work this turn"
	case hasKey(n.splitWaits, r.group) || hasKey(n.orphanWaits, r.group) || hasKey(n.catalogWaits, r.group):
		return "a wait of the node's"
	case hasKey(n.live.mergeHints, r.group):
		return "a merge hint"
	}
	r.appliedMu.Lock()
	watched := r.appliedCh != nil
	r.appliedMu.Unlock()
	if watched {
		return "a wait for its applied index"
	}
	r.spans.mu.Lock()
	staging := len(r.spans.staged) > 0 || r.spans.fetching
	r.spans.mu.Unlock()
	if staging {
		return "a span snapshot fetch"
	}
	if frozen, err := n.st().GroupFrozen(r.group); err != nil || frozen {
		return "a frozen span"
	}
	return ""
}

// hasKey says whether m has key k.
func hasKey[K comparable, V any](m map[K]V, k K) bool {
	_, ok := m[k]
	return ok
}

// unload takes the replicas, each readyToUnload, out of the node's
// memory, keeping an unloadedReplica of each. Their raft logs forget
// them on the apply goroutine, after the work queued there for them.
func (n *Node) unload(rs []*replica) {
	if len(rs) == 0 {
		return
	}
	gone := make(map[*replica]bool, len(rs))
	groups := make([]uint64, len(rs))
	recs := make(map[uint64]unloadedReplica, len(rs))
	for i, r := range rs {
		gone[r], groups[i] = true, r.group
		recs[r.group] = unloadedReplica{leader: r.leader.Load(), applied: r.applied.Load(), lastStamp: r.lastStamp, appliedTS: r.appliedTS.Load(),
			dormantLeader: r.dormantLeader.Load(), tableless: r.tableless, votersBehind: r.votersBehind}
	}
	n.replicasMu.Lock()
	if err := n.setUnloaded(recs, len(recs)); err != nil {
		n.replicasMu.Unlock()
		n.fail(fmt.Errorf("cluster: unload replicas: %w", err))
		return
	}
	n.replicasPeak = max(n.replicasPeak, len(n.replicas))
	for _, r := range rs {
		delete(n.replicas, r.group)
		if r.dormantLeader.Load() {
			n.unloadedLeaders++
		}
	}
	n.replicaList = slices.DeleteFunc(n.replicaList, func(r *replica) bool { return gone[r] })
	n.replicas = shrink.Map(n.replicas, &n.replicasPeak)
	if cap(n.replicaList) > shrink.From && len(n.replicaList) < cap(n.replicaList)/4 {
		n.replicaList = slices.Clone(n.replicaList)
	}
	n.replicasMu.Unlock()
	// The raft log's state of a group loaded again before this runs is
	// the loaded replica's, and stays. The store's applied indexes are
	// synced first: a node that crashes then starts the groups unloaded
	// (startsUnloaded), not to apply again what they had.
	n.applyCh <- applyItem{fn: func() error {
		// Of every group still hosted, loaded again or not: a replica
		// loaded again starts counting its unsynced applies from none,
		// and whatever it or the loop does to the store (its applies, a
		// drop, a retirement) is queued here behind this. A group gone
		// (dropped) is left alone.
		unsynced := map[uint64]uint64{}
		var err error
		n.replicasMu.RLock()
		for _, r := range rs {
			if r.sinceSync == 0 {
				continue
			}
			hosted := n.replicas[r.group] != nil
			if !hosted {
				if _, hosted, err = n.unloadedOf(r.group); err != nil {
					break
				}
			}
			if hosted {
				unsynced[r.group] = r.applied.Load()
			}
		}
		n.replicasMu.RUnlock()
		if err != nil {
			n.fail(err)
			return err
		}
		if len(unsynced) > 0 {
			// Not under the lock: the loop and the request goroutines
			// need it meanwhile, and the fsync may be slow.
			if err := n.st().SyncAppliedIndexes(unsynced); err != nil {
				n.fail(err)
				return err
			}
		}
		n.replicasMu.RLock()
		for _, g := range groups {
			var u unloadedReplica
			var ok bool
			if u, ok, err = n.unloadedOf(g); err != nil {
				break
			}
			if ok && !u.loading {
				n.cfg.Log.Unload(g)
			}
		}
		n.replicasMu.RUnlock()
		if err != nil {
			n.fail(err)
		}
		return err
	}}
}

// hostsGroup says whether the node hosts a replica of group id, loaded or
// not. A record it cannot read makes the node fail, and counts as hosted:
// no caller then drops what the group may hold.
func (n *Node) hostsGroup(id uint64) bool {
	n.replicasMu.RLock()
	if n.replicas[id] != nil {
		n.replicasMu.RUnlock()
		return true
	}
	_, unloaded, err := n.unloadedOf(id)
	n.replicasMu.RUnlock()
	if err != nil {
		n.fail(err)
		return true
	}
	return unloaded
}

// replicaOf returns the node's replica of group id, loading it again if
// it was unloaded, or nil if the node hosts none. It runs on the loop.
func (n *Node) replicaOf(id uint64) *replica {
	if r := n.replicas[id]; r != nil {
		return r
	}
	// Marked first: the apply goroutine's unload of its raft log state,
	// if still to come, then leaves the state loaded here alone. The
	// record stays until the replica takes its place (startReplica), so
	// other goroutines see the group hosted throughout.
	n.replicasMu.Lock()
	u, ok, err := n.unloadedOf(id)
	if ok {
		u.loading = true
		err = n.setUnloaded(map[uint64]unloadedReplica{id: u}, 0)
	}
	n.replicasMu.Unlock()
	if err != nil {
		n.fail(fmt.Errorf("cluster: load the replica of range group %d again: %w", id, err))
		return nil
	}
	if !ok {
		return nil
	}
	if u.dormantLeader {
		n.unloadedLeaders--
	}
	from := &u
	if u.cold {
		from = nil
	}
	r, err := n.startReplica(id, nil, from)
	if err != nil {
		n.fail(fmt.Errorf("cluster: load the replica of range group %d again: %w", id, err))
		return nil
	}
	if r == nil {
		// Its raft log says it was removed meanwhile (it cannot be).
		n.replicasMu.Lock()
		_, _, err := n.dropUnloaded(id)
		n.replicasMu.Unlock()
		if err != nil {
			n.fail(err)
		}
		return nil
	}
	if u.cold {
		// Started with its node, it would have stopped guarding its
		// vote an election timeout after the start (voteAfter): no
		// leader's lease counts on it since, for none of its group's
		// messages came here before this load.
		r.voteAfter = min(r.voteAfter, uint64(n.cfg.ElectionTicks))
	}
	n.replicaLoads.Add(1)
	return r
}

// restore gives a replica just loaded again what its record kept, before
// the node publishes it.
func (r *replica) restore(u *unloadedReplica) {
	if u.applied > r.applied.Load() {
		// Raft, started from it when the replica wakes, hands nothing
		// applied over again.
		r.applied.Store(u.applied)
		r.members.seen = max(r.members.seen, u.applied)
	}
	r.leader.Store(u.leader)
	r.dormantLeader.Store(u.dormantLeader)
	r.tableless = u.tableless
	r.votersBehind = u.votersBehind
	r.lastStamp = u.lastStamp
	r.appliedTS.Store(u.appliedTS)
	r.quiesced.Store(true)
}

// loadWhere loads again the unloaded replicas whose records match keep.
// It runs on the loop.
func (n *Node) loadWhere(keep func(group uint64, u unloadedReplica) bool) {
	var ids []uint64
	n.replicasMu.RLock() // the apply goroutine marks records (markMoving)
	err := n.eachUnloaded(func(id uint64, u unloadedReplica) bool {
		if keep(id, u) {
			ids = append(ids, id)
		}
		return true
	})
	n.replicasMu.RUnlock()
	if err != nil {
		n.fail(err)
		return
	}
	for _, id := range ids {
		n.replicaOf(id)
	}
}

// loadLeaderToMove loads one unloaded dormant leader again and returns
// it, if any is and a live peer holds few enough leases to take one
// (leaseTarget), so that balanceLeases can hand its lease over: the one
// of the lowest group, since balanceLeases moves one lease a look.
func (n *Node) loadLeaderToMove() *replica {
	if n.unloadedLeaders == 0 {
		return nil
	}
	takes := false
	for node := range n.live.heard {
		takes = takes || n.canTakeLease(node)
	}
	if !takes {
		return nil
	}
	var leader uint64
	n.replicasMu.RLock()
	err := n.eachUnloaded(func(id uint64, u unloadedReplica) bool {
		if u.dormantLeader {
			leader = id
		}
		return leader == 0
	})
	n.replicasMu.RUnlock()
	if err != nil {
		n.fail(err)
		return nil
	}
	if leader == 0 {
		return nil
	}
	return n.replicaOf(leader)
}

// groupLoaded is group for a request's goroutine: a replica unloaded is
// loaded again by the loop. It returns nil if the node hosts none, or if
// ctx ends or the node stops first.
func (n *Node) groupLoaded(ctx context.Context, id uint64) *replica {
	if r := n.group(id); r != nil || !n.hostsGroup(id) {
		return r
	}
	r, _ := callOnLoop(ctx, n, func() *replica { return n.replicaOf(id) })
	return r
}

// markMoving notes, on the apply goroutine, that the descriptor of group
// id names new voters: an unloaded replica's record no longer tells its
// members (the range reports take them from the descriptor), until the
// loop loads it for the host change that follows.
func (n *Node) markMoving(id uint64) {
	n.replicasMu.Lock()
	u, ok, err := n.unloadedOf(id)
	if ok && !u.moving {
		u.moving = true
		err = n.setUnloaded(map[uint64]unloadedReplica{id: u}, 0)
	}
	n.replicasMu.Unlock()
	if err != nil {
		n.fail(err)
	}
}

// unloadedReplica returns the node's record of its replica of group id,
// if it was unloaded. A record it cannot read makes the node fail, and
// is none.
func (n *Node) unloadedReplica(id uint64) (unloadedReplica, bool) {
	n.replicasMu.RLock()
	u, ok, err := n.unloadedOf(id)
	n.replicasMu.RUnlock()
	if err != nil {
		n.fail(err)
	}
	return u, ok
}

// logEmpty says whether the node's raft log holds no state of group (a
// log it cannot read is not empty).
func (n *Node) logEmpty(group uint64) bool {
	st, err := n.cfg.Log.Group(group)
	return err == nil && st.Empty()
}
