package cluster

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/tabuladb/tabula/cluster/raftlog"
	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
)

// defaultGroupVoters is how many voters a new table's range group gets
// when the cluster has that many nodes.
const defaultGroupVoters = 3

// campaignTicks is how long a node that starts a new range group keeps
// calling its election, one tick in two, until the group has a leader:
// the other voters start hosting the group only as they apply the
// table's creation, so the first votes may reach nodes that drop them.
// The system group's leader does the same for a hosted group with no
// known leader (tickReplicas).
const campaignTicks = 20

// hostChange is a change of the range groups the node hosts, for the
// loop to make, queued by the apply goroutine as it applies a table's
// creation or drop, a split, or a move (the loop owns the replica list;
// the apply goroutine cannot wait on the loop, which waits on it).
type hostChange struct {
	group uint64
	// A change with none of drop, retire and wake starts hosting the
	// group, or wakes it if hosted already: from its raft log if it has
	// one, else bootstrapped as boot says (a new table's group, a split's
	// child; nil: not hosted). campaign starts its election at once.
	boot     *groupBoot
	campaign bool
	// drop drops the group (its table was dropped); merged drops it as
	// merged into another group, which holds its span now; orphan drops
	// a group merged where its keys went, to a group not hosted here,
	// with its data (range_merge.go); superseded drops one merged away
	// whose keys a group of this node holds, and its span record
	// (dropSuperseded); leftover drops one a group hosted here records
	// it merged, with its data (dropLeftover).
	drop, merged, orphan, superseded, leftover bool
	// retire, when set, names this node's member of the group, which the
	// group removed: it goes, and the group stays (range_members.go).
	retire uint64
	// wake asks a hosted replica to tick again: its descriptor changed,
	// and its leader has members to move or a split to make.
	wake bool
}

// groupBoot is how a new range group starts on a node: its configuration,
// the raft id of the node's member in it, and the index its log starts
// after (the store's applied index for the group when it starts).
type groupBoot struct {
	conf   *raftpb.ConfState
	member uint64
	index  uint64
}

// hostQueue is the apply goroutine's queue of host changes for the loop.
type hostQueue struct {
	mu      sync.Mutex
	pending []hostChange
	wake    chan struct{} // capacity 1: a change is pending
}

func (q *hostQueue) add(c hostChange) {
	q.mu.Lock()
	q.pending = append(q.pending, c)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *hostQueue) take() []hostChange {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.pending
	q.pending = nil
	return out
}

// applyHostChanges starts and drops the range groups the apply goroutine
// queued, in its order. A group that cannot be hosted stops the node: it
// is a voter the group counts on.
func (n *Node) applyHostChanges() error {
	for _, c := range n.hosts.take() {
		var err error
		switch r := n.replicaOf(c.group); {
		case c.retire != 0:
			err = n.retire(c.group, c.retire)
		case c.orphan:
			err = n.dropOrphan(c.group)
		case c.leftover:
			err = n.dropLeftover(c.group)
		case c.merged:
			err = n.mergedAway(c.group)
		case c.superseded:
			// Checked again: noteMerges looked before this turn.
			if sp, ok := n.groupSpan(c.group); ok && n.superseded(c.group, sp) {
				err = n.dropSuperseded(c.group)
			}
		case c.drop:
			err = n.dropGroup(c.group, errTableGone)
		case r != nil:
			// A change to start a group hosted already wakes it, as wake
			// does: its catalog entry changed (a split's child that its
			// parent's log started here before the catalog named it may
			// have quiesced with nothing to move).
			r.quiesced.Store(false)
		case !c.wake:
			err = n.startHosting(c)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// startHosting hosts the group of a host change that starts one.
func (n *Node) startHosting(c hostChange) error {
	if err := n.hostGroup(c.group, c.boot); err != nil {
		return err
	}
	// The node that proposed the table or the split starts the group's
	// election, so the first writes need not wait for an election
	// timeout.
	if r := n.replicaOf(c.group); r != nil && c.campaign {
		r.standNow()
	}
	return nil
}

// standNow starts an election of the replica's group at once, and keeps
// standing for campaignTicks ticks while the group has no leader.
func (r *replica) standNow() {
	r.campaignLeft = campaignTicks
	r.campaign()
}

// campaign starts an election of the replica's group, while it is still
// starting (campaignLeft) and has no leader.
func (r *replica) campaign() {
	if r.leader.Load() != 0 || r.rawNode().BasicStatus().RaftState == raft.StateLeader {
		r.campaignLeft = 0
		return
	}
	if r.guardingVotes() {
		return // a later tick of campaignLeft, or raft, stands
	}
	// An error is a node that is not a voter, which a new group's
	// creator is; there is nothing to do about it but let raft time out.
	_ = r.rawNode().Campaign()
	r.n.touch(r)
}

// dropGroup stops the node's replica of group (its table was dropped, or
// it was merged into another) and deletes the group's raft log. Requests
// waiting on the replica are answered why.
func (n *Node) dropGroup(group uint64, why error) error {
	r := n.replicaOf(group)
	if r == nil {
		// Not hosted: a member retired here leaves its tombstone.
		return n.cfg.Log.DeleteGroup(group)
	}
	n.unhost(r, why)
	// After the group's entries still queued on the apply goroutine,
	// which may compact its log.
	if err := n.onApply(func() error { return n.cfg.Log.DeleteGroup(group) }); err != nil {
		return fmt.Errorf("cluster: drop range group %d: %w", group, err)
	}
	n.log.Info("cluster: range group dropped", "node", n.cfg.ID, "group", group, "why", why)
	return nil
}

// errTableGone answers the requests in flight on a range group whose
// table was dropped.
var errTableGone = &odata.Error{Code: partition.CodeTableNotFound, Message: "The table specified does not exist.", Pos: -1}

// wrongGroup refuses an entity write of PartitionKey pk that reaches the
// log of a group other than the one that holds it: the system group's,
// for a table that has range groups (a node proposed it before it knew
// of them: its client retries, and is routed to the group); a range
// group's, for another table (this one's dropped and created again), or
// for a key outside its span (the range was split: retried, and routed
// to the new range). The answer is the same on every replica: the
// catalog at a given entry of the system group is, a range group's
// entries are applied only between its table's creation and drop, or
// refused, and its span changes only at a position of its own log
// (partition.GroupHolds). A group hostGroup was given with no table (in
// tests) writes the tables that have no group. An error is the store's.
func (r *replica) wrongGroup(s *partition.Store, account, table, pk string) (refused, err error) {
	if r.group == systemGroup || r.tableless {
		g, err := s.TableGroup(account, table)
		switch {
		case err != nil || g.ID == 0:
			return nil, nil // the store answers for a missing table
		case r.group == systemGroup:
			return errMoved(fmt.Sprintf("the table's entities are replicated by range group %d", g.ID)), nil
		}
		return errTableGone, nil
	}
	ofTable, holds, err := s.GroupHolds(r.group, account, table, pk)
	switch {
	case err != nil:
		return nil, err
	case !ofTable:
		return errTableGone, nil
	case !holds:
		return errMoved(fmt.Sprintf("range group %d does not hold PartitionKey %q: the table's range was split", r.group, pk)), nil
	}
	return nil, nil
}

// hostTableGroups hosts, before the node runs, the members of range
// groups its raft log holds, for the tables its store knows: the groups
// its catalog names, and those it no longer does whose span the store
// still holds (merged away, not yet taken by the group before them). A
// group the node holds no member of is hosted when a message for one
// comes (hostMember); one whose member here was retired keeps no data
// here, which a crash in the middle of its retirement may have left,
// unless it is frozen (its data is the merge's).
//
// A group at rest is not started but recorded unloaded (startsUnloaded),
// so that a node's memory at its start does not grow with the number of
// ranges it hosts; its raft log state is dropped again once checked.
func (n *Node) hostTableGroups() error {
	// The records of the last run are not this one's: its replicas are
	// all loaded or recorded cold below.
	if _, err := n.cfg.Log.ClearUnloaded(); err != nil {
		return fmt.Errorf("cluster: clear the unloaded records: %w", err)
	}
	cold := map[uint64]unloadedReplica{}
	writeCold := func() error {
		n.replicasMu.Lock()
		defer n.replicasMu.Unlock()
		err := n.setUnloaded(cold, len(cold))
		clear(cold)
		return err
	}
	groups := n.st().TableGroups()
	inCatalog := len(groups)
	outside, err := n.st().OutsideCatalog()
	if err != nil {
		return err
	}
	var frozen []partition.Span
	for _, g := range outside {
		st, err := n.cfg.Log.Group(g.Group)
		if err != nil {
			return fmt.Errorf("cluster: group %d: %w", g.Group, err)
		}
		if g.Frozen {
			frozen = append(frozen, g.Span)
		}
		if !g.Frozen || !st.Replica().Removed {
			groups = append(groups, partition.TableGroup{Account: g.Span.Account, Table: g.Span.Table, Group: partition.RangeGroup{ID: g.Group}})
		}
	}
	for i, tg := range groups {
		id := tg.Group.ID
		st, err := n.cfg.Log.Group(id)
		if err != nil {
			return fmt.Errorf("cluster: group %d: %w", id, err)
		}
		if i < inCatalog {
			applied, rest, err := n.startsUnloaded(tg, st, frozen)
			if err != nil {
				return err
			}
			if rest {
				cold[id] = unloadedReplica{applied: applied, cold: true}
				n.cfg.Log.Unload(id)
				if voters := tg.Group.Voters; voters[id%uint64(len(voters))] == n.cfg.ID {
					n.toWarm = append(n.toWarm, id)
				}
				if len(cold) >= coldBatch {
					if err := writeCold(); err != nil {
						return err
					}
				}
				continue
			}
		}
		switch {
		case st.Empty():
		case st.Replica().Removed:
			applied, err := n.st().AppliedIndex(id)
			if err != nil {
				return err
			}
			if applied == 0 {
				continue // emptied already
			}
			if err := n.emptyGroupSpan(id, true); err != nil {
				return err
			}
		default:
			if err := n.hostGroup(id, nil); err != nil {
				return fmt.Errorf("cluster: table %s/%s: %w", tg.Account, tg.Table, err)
			}
		}
	}
	return writeCold()
}

// coldBatch is how many cold records a start writes at once.
const coldBatch = 4096

// startsUnloaded says whether the node's replica of the range group of
// tg, whose raft log is st, is at rest as the node starts, and so is
// recorded unloaded rather than started; applied is the store's applied
// index of it. At rest is: everything in its log applied, this node's
// member among its voters, its configuration the descriptor's voters and
// no other member, its span the catalog's range, and none of the frozen
// spans (from hostTableGroups) starting where its span ends: the
// catalog may have split the range again where the group it merged
// starts (spanDue). A replica with anything to finish (entries to apply,
// a membership change, its own retirement, a split or a merge) starts;
// the others stay unloaded even while a merge elsewhere is under way.
func (n *Node) startsUnloaded(tg partition.TableGroup, st *raftlog.Storage, frozen []partition.Span) (applied uint64, rest bool, err error) {
	id := tg.Group.ID
	if st.Empty() || st.Replica().Removed {
		return 0, false, nil
	}
	if applied, err = n.st().AppliedIndex(id); err != nil {
		return 0, false, err
	}
	last, err := st.LastIndex()
	if err != nil {
		return 0, false, fmt.Errorf("cluster: group %d: read raft log: %w", id, err)
	}
	member := st.Replica().ID
	if member == 0 {
		member = n.cfg.ID // a founder's
	}
	cs := st.ConfState()
	voters := nodesOf(cs.GetVoters())
	slices.Sort(voters)
	if applied == 0 || applied != last || !slices.Contains(cs.GetVoters(), member) ||
		len(cs.GetLearners())+len(cs.GetVotersOutgoing())+len(cs.GetLearnersNext()) > 0 ||
		!slices.Equal(voters, slices.Sorted(slices.Values(tg.Group.Voters))) {
		return 0, false, nil
	}
	sp, ok, err := n.st().GroupSpan(id)
	if err != nil || !ok || sp.HighPartitionKey != tg.End ||
		sp.HighPartitionKey != "" && slices.ContainsFunc(frozen, func(f partition.Span) bool { return endsWhereStarts(sp, f) }) {
		return 0, false, err
	}
	return applied, true, nil
}

// deleteMergedLogs deletes, as the node starts to run, the raft logs of range
// groups the catalog merged away (it named them once and names them no
// more) and the store holds no span of: the record goes first where a
// group is dropped as merged (forgetMergedInto, on the apply goroutine,
// so that the group's queued entries are refused at once), and the log
// later, on the loop; a crash between the two left a log nothing would
// host or delete.
func (n *Node) deleteMergedLogs() error {
	ids, err := n.cfg.Log.Groups()
	if err != nil {
		return err
	}
	for _, id := range ids {
		_, named, err := n.st().GroupTable(id)
		if err != nil {
			return err
		}
		if id == systemGroup || named || !n.catalogKnew(id) || n.hostsGroup(id) {
			continue
		}
		recorded, err := n.st().SpanRecorded(id)
		if err != nil {
			return err
		}
		if recorded {
			continue
		}
		if err := n.cfg.Log.DeleteGroup(id); err != nil {
			return fmt.Errorf("cluster: delete the raft log of merged range group %d: %w", id, err)
		}
	}
	return nil
}

// pickVoters chooses the voters of a new table's range group: this node
// (the leader proposing it, so the group's first leader is the node that
// already answers for the table), then the other voters of the system
// group, the ones heard from lately first, in id order.
func (n *Node) pickVoters() []uint64 {
	n.confMu.Lock()
	voters := slices.Clone(n.conf.GetVoters())
	n.confMu.Unlock()
	var live map[uint64]bool
	if st := n.status.Load(); st != nil {
		live = st.live
	}
	rank := func(id uint64) int {
		switch {
		case id == n.cfg.ID:
			return 0
		case live[id]:
			return 1
		}
		return 2
	}
	slices.SortFunc(voters, func(a, b uint64) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a, b))
	})
	return voters[:min(len(voters), defaultGroupVoters)]
}

// someVoter returns a voter of a group this node does not host, to
// forward a request to: the first other node heard from lately, or the
// first other one (0 when the node is the only one named).
func (n *Node) someVoter(voters []uint64) uint64 {
	var first uint64
	st := n.status.Load()
	for _, v := range voters {
		if v == n.cfg.ID {
			continue
		}
		if st != nil && st.live[v] {
			return v
		}
		if first == 0 {
			first = v
		}
	}
	return first
}

// awaitTableGroup waits, for at most a few election timeouts, until a
// table this node just created has a range group with a ready leader
// (this node, once it has applied its term's first entry, or another),
// so the table's first writes find one. A table whose group does not
// elect in that time is still created: its writes wait for the group.
func (n *Node) awaitTableGroup(ctx context.Context, account, table string) {
	g, err := n.st().TableGroup(account, table)
	if err != nil || !g.Has(n.cfg.ID) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Duration(n.cfg.ElectionTicks)*n.cfg.TickInterval)
	defer cancel()
	tick := time.NewTicker(n.cfg.TickInterval / 20)
	defer tick.Stop()
	for {
		if r := n.groupLoaded(ctx, g.ID); r != nil && (r.ready.Load() || r.leader.Load() != 0 && r.leader.Load() != n.cfg.ID) {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		case <-n.stopped:
			return
		}
	}
}

// carryRangeGroups makes a store restored from a system snapshot (the
// leader's whole store, next) hold this node's own copy of each range
// group it hosts, taken from its live store (old): the spans and applied
// indexes that its logs of those groups continue, not the leader's. The
// spans of the other groups are emptied and their applied indexes reset:
// a group the node is to be a member of but did not host yet (created
// while it was behind, or moved here) starts from nothing, hosted when
// its leader's first message comes, which brings it a span snapshot. It
// returns the host changes to make once the store is switched: the
// groups hosted whose table the snapshot no longer has (dropped while
// the node was behind) are dropped, and the unloaded replicas whose
// descriptor the snapshot changed (a split, a merge, new voters: the
// entries that would have woken them, not applied here) are woken, to
// learn where they stand from their groups; the others stay unloaded.
// Groups the snapshot's catalog merged away are
// carried too if hosted here, or frozen here (their data is the merge's);
// the leader's own records of such groups are dropped.
// It runs on the apply goroutine, so no range group applies meanwhile,
// and before the switch, so a crash leaves the old store in use.
func (n *Node) carryRangeGroups(old, next *partition.Store) ([]hostChange, error) {
	n.replicasMu.RLock()
	hosted := make(map[uint64]bool, len(n.replicas)+n.unloadedCount)
	for id, r := range n.replicas {
		// A group without a table (tests) writes the tables that have
		// no group, which the snapshot brings: nothing of it to carry,
		// and no table of its own whose drop would end it.
		hosted[id] = id != systemGroup && !r.tableless
	}
	unloaded := make([]uint64, 0, n.unloadedCount)
	err := n.eachUnloaded(func(id uint64, u unloadedReplica) bool {
		hosted[id] = !u.tableless
		unloaded = append(unloaded, id)
		return true
	})
	n.replicasMu.RUnlock()
	if err != nil {
		return nil, err
	}
	// The spans of the groups not hosted are emptied first: one may
	// overlap the span of a hosted group that has not applied its split
	// yet, whose copy then puts back what is its own.
	var carry []uint64
	for _, tg := range next.TableGroups() {
		id, sp := tg.Group.ID, tg.Span()
		if hosted[id] {
			carry = append(carry, id)
			continue
		}
		// A member to be here comes from the group's leader, which sends
		// it a span snapshot: it is hosted when that leader's first
		// message comes (hostMember).
		if err := next.EmptySpan(id, sp); err != nil {
			return nil, fmt.Errorf("cluster: carry range group %d into the snapshot's store: %w", id, err)
		}
	}
	// The groups merged away in the snapshot's catalog are the leader's
	// own: emptied and forgotten, but for those hosted here, which are
	// carried (their own span, frozen or not, until merged here).
	outside, err := next.OutsideCatalog()
	if err != nil {
		return nil, fmt.Errorf("cluster: carry range groups into the snapshot's store: %w", err)
	}
	var forgotten []uint64
	for _, g := range outside {
		if hosted[g.Group] {
			continue
		}
		if err := next.EmptySpan(g.Group, g.Span); err != nil {
			return nil, fmt.Errorf("cluster: carry range group %d into the snapshot's store: %w", g.Group, err)
		}
		forgotten = append(forgotten, g.Group)
	}
	// Before the carries below, which may bring this node's own record of
	// such a group back (a frozen one).
	if err := next.ForgetGroups(forgotten); err != nil {
		return nil, fmt.Errorf("cluster: carry range groups into the snapshot's store: %w", err)
	}
	// The groups the snapshot's catalog no longer names whose span this
	// node holds are carried too: those hosted, and the frozen ones
	// (a member retired after the freeze keeps its data for the merge).
	oldOutside, err := old.OutsideCatalog()
	if err != nil {
		return nil, fmt.Errorf("cluster: carry range groups into the snapshot's store: %w", err)
	}
	candidates := map[uint64]bool{}
	for id, ok := range hosted {
		candidates[id] = ok
	}
	for _, g := range oldOutside {
		candidates[g.Group] = candidates[g.Group] || g.Frozen
	}
	for id, ok := range candidates {
		_, named, err := next.GroupTable(id)
		if err != nil {
			return nil, err
		}
		if named || !ok || slices.Contains(carry, id) {
			continue
		}
		// Of the same table: its first range's group is the index of
		// its creation, which came before the group's (not a table of
		// the name created again).
		if sp, ok, err := old.GroupSpan(id); err == nil && ok {
			if rs, err := next.TableRanges(sp.Account, sp.Table); err == nil && len(rs) > 0 && rs[0].Group.ID <= id {
				carry = append(carry, id)
			}
		}
	}
	for _, id := range carry {
		delete(hosted, id)
		if err := carrySpan(old, next, id); err != nil {
			return nil, fmt.Errorf("cluster: carry range group %d into the snapshot's store: %w", id, err)
		}
	}
	var changes []hostChange
	var dropped []uint64
	for id, ok := range hosted {
		if !ok {
			continue
		}
		dropped = append(dropped, id)
		changes = append(changes, hostChange{group: id, drop: true})
	}
	// The snapshot's records of the dropped groups are the leader's: an
	// applied index may be past this node's log of the group, which the
	// replica loaded to be dropped would take for a lost log.
	if err := next.ForgetGroups(dropped); err != nil {
		return nil, fmt.Errorf("cluster: carry range groups into the snapshot's store: %w", err)
	}
	for _, id := range unloaded {
		if !hosted[id] && !sameDescriptor(old, next, id) { // hosted[id]: dropped above
			changes = append(changes, hostChange{group: id, wake: true})
		}
	}
	return changes, nil
}

// sameDescriptor says whether stores a and b describe range group id
// alike: both not at all, or as the same range with the same voters. A
// descriptor it cannot read differs.
func sameDescriptor(a, b *partition.Store, id uint64) bool {
	ta, inA, errA := a.GroupTable(id)
	tb, inB, errB := b.GroupTable(id)
	return errA == nil && errB == nil && inA == inB && ta.Span() == tb.Span() &&
		slices.Equal(slices.Sorted(slices.Values(ta.Group.Voters)), slices.Sorted(slices.Values(tb.Group.Voters)))
}

// carrySpan makes store to hold group's span as store from does: its
// entities, applied index and freeze.
func carrySpan(from, to *partition.Store, group uint64) error {
	sp, ok, err := from.GroupSpan(group)
	if err != nil || !ok {
		return err
	}
	if err := copySpan(from, to, group, sp); err != nil {
		return err
	}
	if frozen, err := from.GroupFrozen(group); err != nil || !frozen {
		return err
	}
	applied, err := from.AppliedIndex(group)
	if err != nil {
		return err
	}
	return to.FreezeGroupSpan(partition.WithStamp(context.Background(), partition.Stamp{Group: group, Index: applied}), group)
}

// copySpan replaces span sp of group in store to with from's.
func copySpan(from, to *partition.Store, group uint64, sp partition.Span) error {
	ss, err := from.SnapshotSpan(group, sp)
	if err != nil {
		return err
	}
	defer ss.Close()
	pr, pw := io.Pipe()
	go func() {
		_, err := ss.WriteTo(pw)
		pw.CloseWithError(err)
	}()
	_, err = to.IngestSpan(group, sp, pr)
	pr.CloseWithError(err) // ends the writer if the ingest stopped early
	return err
}
