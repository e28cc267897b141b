package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/tabuladb/tabula/cluster/transport"
	"github.com/tabuladb/tabula/partition"
)

// A table's lease is the leadership of its range group: the leader serves
// its reads and orders its writes. A new table's lease starts with the
// node that created it (the system group's leader then), so leases
// gather there; the nodes spread them (balanceLeases), and an operator
// moves one at will (`tabula cluster transfer-lease`), by raft's
// leadership transfer, which the current leader carries out once the
// target has the whole log. Only the leader is asked: raft's followers
// would forward the request under the target's name, which the transport
// refuses (a node sends only messages of its own).

// leaseBalanceElections is how many election timeouts pass between two
// looks of a node at its leases, and busyLeaseElections how many between
// two handovers of a busy group's lease. minLeaseLoadGap is the least
// difference of load, in requests per second, that moves a lease to even
// it out.
const (
	leaseBalanceElections = 5
	busyLeaseElections    = 300
	minLeaseLoadGap       = 50
)

// balanceLeases, on the loop every tick, counts the range-group leases
// the node holds, which its liveness messages tell its peers, and every
// leaseBalanceElections election timeouts hands one lease over to a
// voter of its group on the live node holding the fewest, if that node
// holds two or more fewer than this one. Every node does the same, so the
// counts even out (to within one) a lease at a time, without a
// coordinator; the placement controller's switch (PlacementInterval < 0)
// turns it off too. An idle (quiesced) group's lease goes first: while a
// lease moves, its old holder refuses the writes it has not proposed yet
// (503 ServerBusy, repeated by the front end), which an idle group has none of;
// a busy group's goes only when no idle one can, and at most once every
// busyLeaseElections election timeouts, and not so as to make the two
// nodes' loads less even (below).
//
// Counts even out leases, not load: once they are even, a node whose
// ranges take minLeaseLoadGap more requests per second than a voter's
// node's, and a quarter more than that node's, hands that node the lease
// of the busy group that evens the two out best (spreadLoad). A group
// moves only if its rate is below the difference, so the sum of the
// squares of the two loads falls with every move and no lease comes back
// for load alone.
func (n *Node) balanceLeases() {
	var led []*replica
	for _, r := range n.replicaList {
		if r.group != systemGroup && (r.isLeader || r.dormantLeader.Load()) {
			led = append(led, r)
		}
	}
	n.live.held = uint64(len(led) + n.unloadedLeaders)
	if n.cfg.PlacementInterval < 0 || n.live.ticks%uint64(leaseBalanceElections*n.cfg.ElectionTicks) != 0 {
		return
	}
	if r := n.loadLeaderToMove(); r != nil {
		led = append(led, r)
	}
	rates := n.ledRates(led)
	var load float64
	for _, rate := range rates {
		load += rate
	}
	n.live.load = uint64(load + 0.5)
	busyEvery := uint64(busyLeaseElections * n.cfg.ElectionTicks)
	if n.busyLeaseTicks != 0 {
		busyEvery = n.busyLeaseTicks
	}
	busyOK := n.live.busyLeaseAt == 0 || n.live.ticks-n.live.busyLeaseAt >= busyEvery
	handOverOrder(led, rates)
	for _, r := range led {
		idle, dormant := r.quiesced.Load(), r.dormantLeader.Load()
		if !dormant && !idle && !busyOK {
			continue // busy, and a busy lease moved lately: leave it
		}
		if !dormant && (!r.ready.Load() || !r.settled()) {
			if !idle {
				break // the least loaded busy lease left goes at a later look
			}
			continue // electing or moving its members: leave it
		}
		to, toNode := n.leaseTarget(r, idle, rates[r.group])
		if to != 0 && dormant {
			// Woken now and elected again in a moment, it stays awake
			// (maybeDoze) for the next look, which hands it over.
			r.rawNode()
			r.wokenForLease = n.live.ticks
			return
		}
		if to != 0 {
			if !idle {
				n.busyHandedOver(r.group)
			}
			r.handOver(to)
			n.live.leases[toNode]++ // until its next liveness message
			n.log.Info("cluster: handing a lease over to spread them", "group", r.group, "to", toNode,
				"held", n.live.held, "theirs", n.live.leases[toNode]-1)
			return
		}
	}
	if busyOK {
		if g, ok := n.spreadLoad(led, rates); ok {
			n.busyHandedOver(g)
		}
	}
}

// handOverOrder sorts led, a node's leases, in the order evening the
// counts out tries them: idle groups first, the dormant ones among them
// last (one must be woken, and so elected again, before its lease can
// go), then the busy ones, least loaded (rates) first, so that evening
// the counts out moves as few requests as it can.
func handOverOrder(led []*replica, rates map[uint64]float64) {
	class := func(r *replica) int {
		switch {
		case r.dormantLeader.Load():
			return 1
		case r.quiesced.Load():
			return 0
		}
		return 2
	}
	slices.SortStableFunc(led, func(a, b *replica) int {
		return cmp.Or(cmp.Compare(class(a), class(b)), cmp.Compare(rates[a.group], rates[b.group]))
	})
}

// leaseTarget returns the member of r's group, and its node, that r's
// lease goes to to even the nodes' lease counts out (0 if none), without
// making the two nodes' loads less even when the group is busy (its
// requests per second are rate).
func (n *Node) leaseTarget(r *replica, idle bool, rate float64) (to, toNode uint64) {
	for _, id := range r.conf.GetVoters() {
		node := transport.NodeOf(id)
		if !n.canTakeLease(node) || !idle && rate > float64(n.live.load)-float64(n.live.loads[node]) {
			continue
		}
		if to == 0 || n.live.leases[node] < n.live.leases[toNode] {
			to, toNode = id, node
		}
	}
	return to, toNode
}

// canTakeLease says whether node, another live one, holds few enough
// leases to take one of this node's and leave the two counts more even.
func (n *Node) canTakeLease(node uint64) bool {
	return node != n.cfg.ID && n.isLive(node) && n.live.leases[node]+2 <= n.live.held
}

// busyHandedOver notes the hand-over of a busy group's lease: the next
// waits busyLeaseElections election timeouts.
func (n *Node) busyHandedOver(group uint64) {
	n.live.busyLeaseAt = n.live.ticks
	if n.onBusyHandOver != nil {
		n.onBusyHandOver(group)
	}
}

// ledRates returns the requests per second (reads and writes, smoothed:
// partition's range statistics) of the range groups in led that are not
// quiesced; a quiesced one takes none.
func (n *Node) ledRates(led []*replica) map[uint64]float64 {
	st := n.st()
	out := map[uint64]float64{}
	type tableKey struct{ account, table string }
	tables := map[tableKey][]partition.RangeInfo{}
	for _, r := range led {
		if r.quiesced.Load() {
			continue
		}
		sp, ok := n.groupSpan(r.group)
		if !ok {
			continue
		}
		key := tableKey{sp.Account, sp.Table}
		infos, seen := tables[key]
		if !seen {
			infos, _ = st.Ranges(context.Background(), sp.Account, sp.Table) // a table just dropped has none
			tables[key] = infos
		}
		for _, ri := range infos {
			if sp.Contains(ri.StartPartitionKey) {
				out[r.group] += ri.ReadsPerSecond + ri.WritesPerSecond
			}
		}
	}
	return out
}

// spreadLoad hands over the lease of the busy group, among led, that
// evens this node's load and a voter's node's out best, if there is one
// worth it (balanceLeases), and returns the group if it did. It does not
// make the lease counts uneven: the other node holds no more than this one.
//
// Only the most loaded live node moves load (ties to the smallest id), as
// the nodes' liveness messages tell them all: two nodes that both saw the
// same idle node would otherwise both hand it their busy lease at once,
// and it would lead both. And a move must bring the two loads nearer by a
// margin (minLeaseLoadGap, and a quarter of their gap): a group carrying
// nearly all of this node's load, moved to an idle node, would only swap
// the two nodes' roles, and the next look would move it back.
func (n *Node) spreadLoad(led []*replica, rates map[uint64]float64) (uint64, bool) {
	mine := float64(n.live.load)
	for node, load := range n.live.loads {
		if n.isLive(node) && (float64(load) > mine || float64(load) == mine && node < n.cfg.ID) {
			return 0, false
		}
	}
	var pick *replica
	var to, toNode uint64
	best := 0.0
	for _, r := range led {
		rate := rates[r.group]
		if rate <= 0 || r.quiesced.Load() || !r.ready.Load() || !r.settled() {
			continue
		}
		for _, id := range r.conf.GetVoters() {
			node := transport.NodeOf(id)
			if node == n.cfg.ID || !n.isLive(node) || n.live.leases[node] > n.live.held {
				continue
			}
			theirs := float64(n.live.loads[node])
			gap := mine - theirs
			margin := max(minLeaseLoadGap, gap/4)
			if gap < minLeaseLoadGap || gap < theirs/4 || math.Abs(gap-2*rate) > gap-margin {
				continue
			}
			// How much the sum of the squares of the two loads falls.
			if gain := rate * (gap - rate); gain > best {
				best, pick, to, toNode = gain, r, id, node
			}
		}
	}
	if pick == nil {
		return 0, false
	}
	pick.handOver(to)
	n.live.loads[toNode] += uint64(rates[pick.group]) // until its next liveness message
	n.log.Info("cluster: handing a lease over to spread the load", "group", pick.group, "to", toNode,
		"rate", rates[pick.group], "load", mine, "theirs", n.live.loads[toNode]-uint64(rates[pick.group]))
	return pick.group, true
}

// ErrNotHosted is returned for a request about a range group this node
// holds no replica of: ask one of its voters.
var ErrNotHosted = errors.New("cluster: this node holds no replica of the table's range group")

// ErrNotLeaseholder is returned when a lease transfer is asked of a
// replica that does not lead the group: ask its leader (raft would
// forward the request, but a node's messages must be its own).
var ErrNotLeaseholder = errors.New("cluster: this node does not hold the table's lease")

// ErrBadLease is wrapped by the refusal of a lease transfer that cannot
// be done anywhere: a table without a range group, a node not its voter.
var ErrBadLease = errors.New("cluster: no such lease transfer")

// TransferLease moves the lease of the range group of a table that holds
// PartitionKey pk (the first range's for "", the only one of a table not
// split) to node to, one of the group's voters, and waits until to leads
// the group or ctx ends. It is asked of the group's leader: another
// replica answers ErrNotLeaseholder (and knows the leader: groupLeader).
func (n *Node) TransferLease(ctx context.Context, account, table, pk string, to uint64) (group uint64, err error) {
	g, err := n.st().TableGroupFor(account, table, pk)
	switch {
	case err != nil:
		return 0, err
	case g.ID == 0:
		return 0, fmt.Errorf("%w: table %s has no range group (the system group replicates it)", ErrBadLease, table)
	case !g.Has(to):
		return g.ID, fmt.Errorf("%w: node %d is not a voter of the table's range group %d (voters %v)", ErrBadLease, to, g.ID, g.Voters)
	}
	r := n.groupLoaded(ctx, g.ID)
	if r == nil {
		return g.ID, ErrNotHosted
	}
	if r.leader.Load() == to {
		return g.ID, nil
	}
	if !r.ready.Load() && !r.awaitWake(ctx) {
		return g.ID, ErrNotLeaseholder
	}
	begun, err := callOnLoop(ctx, n, func() bool {
		id := memberOf(r.conf, to)
		if !r.isLeader || id == 0 || !slices.Contains(r.conf.GetVoters(), id) {
			return false
		}
		r.handOver(id)
		return true
	})
	switch {
	case err != nil:
		return g.ID, err
	case !begun:
		return g.ID, errBusy(fmt.Sprintf("the lease of group %d could not be handed to node %d: this node no longer leads it, or that node is no voter now", g.ID, to))
	}
	tick := time.NewTicker(n.cfg.TickInterval / 4)
	defer tick.Stop()
	for r.leader.Load() != to {
		// A hand-over that ended with another leader known (this node
		// still, if raft gave the transfer up) will not move the lease:
		// say so rather than wait for a ctx that may have no deadline.
		// The leader is read after the hand-over's end, which the loop
		// writes after the leader it lost the lease to.
		if !r.handingOver.Load() {
			if leader := r.leader.Load(); leader != 0 && leader != to {
				return g.ID, errBusy(fmt.Sprintf("the lease of group %d did not reach node %d (leader %d): ask again", g.ID, to, leader))
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return g.ID, errBusy(fmt.Sprintf("the lease of group %d has not reached node %d yet (leader %d)", g.ID, to, r.leader.Load()))
		case <-n.stopped:
			return g.ID, ErrStopped
		}
	}
	n.log.Info("cluster: lease transferred", "group", g.ID, "table", table, "to", to)
	return g.ID, nil
}

// groupLeader returns the leader of range group id as this node knows it
// (0 when it hosts no replica of it or knows no leader); an unloaded
// replica's record names it (unload.go).
func (n *Node) groupLeader(id uint64) uint64 {
	if r := n.group(id); r != nil {
		return r.leader.Load()
	}
	u, _ := n.unloadedReplica(id)
	return u.leader
}

// A lease hand-over drains first: the leader takes no new write or read
// (refused as moved: the node the client reached repeats it, and it
// reaches the new leader), and asks raft to transfer its leadership only
// once the writes it has in flight are applied, so that a hand-over no
// client asked for leaves none of them with a write of unknown outcome.
// Past one election timeout it transfers anyway; the leader takes
// requests again as soon as raft gives the transfer up (a target that
// does not answer, within an election timeout).
type handover struct {
	to   uint64 // the member the lease goes to; 0: none under way
	at   uint64 // the node's tick count when it began
	sent bool   // raft was asked to transfer
}

// handOver begins handing the replica's lease to member to.
func (r *replica) handOver(to uint64) {
	r.handover = handover{to: to, at: r.n.live.ticks}
	r.handingOver.Store(true)
	r.quiesced.Store(false) // the transfer times out by ticks
	r.continueHandOver()
	r.n.touch(r)
}

// continueHandOver, on the loop every tick of the replica, asks raft to
// transfer once nothing is in flight, and ends a hand-over raft gave up.
func (r *replica) continueHandOver() {
	h := &r.handover
	if h.to == 0 {
		return
	}
	elapsed, timeout := r.n.live.ticks-h.at, uint64(r.n.cfg.ElectionTicks)
	switch {
	case !r.isLeader || elapsed > 2*timeout:
		r.endHandOver()
	case h.sent && r.rawNode().BasicStatus().LeadTransferee == 0:
		r.endHandOver() // raft gave the transfer up, or never took it (a target not a voter)
	case !h.sent && (r.waiters.empty() || elapsed >= timeout):
		h.sent = true
		r.voidLease()
		r.rawNode().TransferLeader(h.to)
		r.n.touch(r)
	}
}

// endHandOver ends the hand-over under way, if any: the leadership moved,
// or raft gave up.
func (r *replica) endHandOver() {
	r.handover = handover{}
	r.handingOver.Store(false)
}

// refuseRequest refuses a request (a proposal or a read) this replica may
// not take now: it is not the ready leader, or it is handing its lease
// over.
func (r *replica) refuseRequest() error {
	switch {
	case !r.ready.Load():
		return r.notReady()
	case r.handingOver.Load():
		return errMoved(fmt.Sprintf("the lease of group %d is being handed over", r.group))
	}
	return nil
}
