package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/cluster/command"
	"github.com/tabuladb/tabula/cluster/transport"
	"github.com/tabuladb/tabula/partition"
)

// Two neighbouring ranges of a table merge in three logs (docs/cluster.md,
// step 5), the right one's group (B) into the left one's (A), once B's
// members are on A's nodes (MergeTable checks; the placement controller
// moves them there first):
//
//  1. the system group records the merge (kind 11, merge-range): the
//     catalog gives B's keys to A, so routing sends them there; A's span
//     does not hold them yet, so they are refused as moved (and repeated
//     by the front end) until step 3;
//  2. B's leader, seeing its group gone from the catalog, freezes B in
//     B's own log (kind 12): from there on every replica of B refuses
//     every write and read, and keeps its data; B changes its members no
//     more;
//  3. A's leader, once every member of A says its store holds B frozen,
//     and durably, merges B's span into A's in A's own log (kind 13):
//     every replica of A takes B's span in the batch of A's applied
//     index, and drops B's raft log. No entity moves.
//
// Step 3 waits for every member of A, not a quorum: a replica of A that
// applied the merge without B's data up to the freeze would serve a span
// it does not hold. Raft's Match says a follower holds an entry, not that
// it applied it, hence the question (msgMergeCheck). A member that does
// not answer for mergePatience is removed from A first (it gets the
// merged span from a snapshot when the group adds it back), so a merge
// never waits on a dead node. A frozen group sends no snapshot (one
// would carry its data without the freeze): it freezes only once its
// live voters are caught up, and no longer compacts its log. What the
// nodes say to each other about merges, and how a node lets go of what a
// merge leaves behind, is in range_merge_messages.go.

// spanWork is what a range group's leader has to do to its span, where
// the catalog and the span disagree.
type spanWork int

const (
	spanSettled spanWork = iota
	spanSplit            // the catalog's range ends before the span does: split (range_split.go)
	spanFreeze           // the catalog names the group no more: freeze, for the group before it
	spanMerge            // the catalog's range ends after the span: take the frozen group that follows
)

// spanDue says what the replica's group has to do to its span, with the
// catalog's range that governs it (the group's own, or, for a group the
// catalog no longer names, the one that holds its keys now) and the span.
func (r *replica) spanDue() (spanWork, partition.TableGroup, partition.Span) {
	if r.group == systemGroup || r.tableless {
		return spanSettled, partition.TableGroup{}, partition.Span{}
	}
	st := r.n.st()
	sp, ok, err := st.GroupSpan(r.group)
	if err != nil || !ok {
		return spanSettled, partition.TableGroup{}, partition.Span{}
	}
	tg, named, err := st.GroupTable(r.group)
	if err != nil {
		return spanSettled, tg, sp // looked at again at the next turn
	}
	if !named {
		// Not known yet (a split's child, started here by its parent's
		// log), or merged away.
		if !r.n.catalogKnew(r.group) {
			return spanSettled, tg, sp
		}
		if ofTable, _, err := st.GroupHolds(r.group, sp.Account, sp.Table, sp.LowPartitionKey); err != nil || !ofTable {
			return spanSettled, tg, sp // of a dropped table
		}
		if tg, err = st.TableRangeFor(sp.Account, sp.Table, sp.LowPartitionKey); err != nil || tg.Group.ID == 0 {
			return spanSettled, tg, sp
		}
	}
	if frozen, err := st.GroupFrozen(r.group); err != nil || frozen {
		return spanSettled, tg, sp
	}
	switch {
	case tg.End != "" && (sp.HighPartitionKey == "" || sp.HighPartitionKey > tg.End):
		return spanSplit, tg, sp
	case !named:
		return spanFreeze, tg, sp
	case sp.HighPartitionKey != "" && (tg.End == "" || sp.HighPartitionKey < tg.End):
		return spanMerge, tg, sp
	case sp.HighPartitionKey != "" && sp.HighPartitionKey == tg.End && (st.HasFrozen() || r.n.hintedMerge(r.group) != 0) && r.unbornAfter(tg, sp):
		// The catalog split the range again where the group it merged
		// starts, before the merge was made: the new range's group never
		// started (this group's log would start it, as it splits), so
		// this group merges the frozen one and then splits.
		return spanMerge, tg, sp
	}
	return spanSettled, tg, sp
}

// unbornAfter says whether the catalog's range after tg has a group that
// no log here has started, while a group whose span starts where sp ends
// is frozen: in this store, or a follower's (a merge hint).
func (r *replica) unbornAfter(tg partition.TableGroup, sp partition.Span) bool {
	n := r.n
	if next, started := n.rangeAfter(tg); next == 0 || started {
		return false
	}
	_, frozen := n.groupAfter(sp)
	return frozen || n.hintedMerge(r.group) != 0
}

// rangeAfter returns the group of the catalog's range that starts where
// tg's ends (0 if none: tg's is the table's last, or the store could not
// tell), and whether a log of it started here: hosted, or its span
// recorded.
func (n *Node) rangeAfter(tg partition.TableGroup) (group uint64, started bool) {
	if tg.End == "" {
		return 0, false
	}
	next, err := n.st().TableRangeFor(tg.Account, tg.Table, tg.End)
	if err != nil || next.Group.ID == 0 || next.Group.Start != tg.End {
		return 0, false
	}
	recorded, err := n.st().SpanRecorded(next.Group.ID)
	if err != nil {
		return 0, false
	}
	return next.Group.ID, recorded || n.hostsGroup(next.Group.ID)
}

// maybeFreeze proposes, on the ready leader of a group the catalog no
// longer names (merged into the range before it), the freeze of its
// span, once every live voter is within catchUpSlack entries of its log:
// a frozen group sends no snapshot, so a follower far behind would never
// reach the freeze. It reports whether it proposed.
//
// Past mergePatience election timeouts it no longer waits for a voter
// that has said nothing for the last one (raft's RecentActive), live
// node or not: a node that took the range before it by a snapshot made
// past the split that started this group never hosted its member here,
// and, once the catalog has merged the group away, never will
// (hostMember hosts no group the catalog does not name), so it would
// hold the freeze back for good (chaos seed 74, moves). Frozen without
// it, the group is merged by the range before it, which removes that
// node's member as one that does not say it holds the frozen group and
// adds it back from a snapshot of the merged span.
func (r *replica) maybeFreeze(st raft.Status, sp partition.Span) bool {
	n := r.n
	if r.members.mergeSince == 0 {
		r.members.mergeSince = n.live.ticks
	}
	patient := n.live.ticks-r.members.mergeSince < uint64(mergePatience*n.cfg.ElectionTicks)
	last, err := r.rlog.LastIndex()
	if err != nil {
		return false
	}
	for id, pr := range st.Progress {
		if pr.IsLearner || id == r.id || !n.isLive(transport.NodeOf(id)) || pr.Match+catchUpSlack >= last {
			continue
		}
		if patient || pr.RecentActive {
			return false
		}
	}
	c := &command.Command{Kind: command.KindFreezeGroup, Account: sp.Account, Table: sp.Table}
	if err := r.rawNode().Propose(c.Append(nil)); err != nil {
		return false
	}
	r.members.proposed = confMark{last + 1, st.GetTerm()}
	n.touch(r)
	n.log.Info("cluster: freezing a range group merged into the one before it", "node", n.cfg.ID, "group", r.group,
		"table", sp.Table, "low", sp.LowPartitionKey, "past_patience", !patient)
	return true
}

// mergePatience is how many election timeouts a leader with a merge to
// make waits for a member of its group to say it holds the frozen group,
// before it removes that member.
const mergePatience = 10

// maybeMerge works, on the ready leader of a group whose catalog range
// ends after its span, toward the merge of the frozen group that follows
// (right): it asks the nodes of its voters whether they hold it frozen,
// and proposes the merge once all do; a voter silent for mergePatience
// election timeouts is removed first. It reports whether it proposed
// anything.
func (r *replica) maybeMerge(st raft.Status, sp partition.Span) bool {
	n := r.n
	if r.members.mergeSince == 0 {
		r.members.mergeSince = n.live.ticks
	}
	right, frozen := n.groupAfter(sp)
	here := right != 0
	if !here {
		right = n.hintedMerge(r.group) // a follower holds it
	}
	if right == 0 || len(r.conf.GetLearners()) > 0 {
		return false // not frozen anywhere known yet; or learners to remove first (reconcile)
	}
	var missing, holding []uint64
	for _, id := range r.conf.GetVoters() {
		switch node := transport.NodeOf(id); {
		case node == n.cfg.ID && frozen, right != 0 && n.live.frozen[node][right] > r.members.mergeSince:
			holding = append(holding, id)
		case node != n.cfg.ID:
			missing = append(missing, id)
			if right != 0 {
				n.live.mergeChecks.add(node, right, r.group)
			}
		}
	}
	last, err := r.rlog.LastIndex()
	if err != nil {
		return false
	}
	patient := n.live.ticks-r.members.mergeSince < uint64(mergePatience*n.cfg.ElectionTicks)
	if !frozen {
		// This node's store does not hold the group to merge frozen: the
		// lease goes to a voter whose does, at once if this one holds
		// nothing of it, past patience if its own may still freeze.
		if (!here || !patient) && len(holding) > 0 && r.members.transferAt != n.live.ticks {
			r.members.transferAt, r.members.mergeSince = n.live.ticks, n.live.ticks
			r.handOver(holding[0])
			n.log.Warn("cluster: handing the lease over to a member that holds the group to merge", "node", n.cfg.ID, "group", r.group, "to", holding[0])
		}
		return false
	}
	if len(missing) > 0 {
		if patient {
			return false
		}
		cc := &raftpb.ConfChange{Type: raftpb.ConfChangeType_ConfChangeRemoveNode.Enum(), NodeId: proto.Uint64(missing[0])}
		if err := r.rawNode().ProposeConfChange(cc); err != nil {
			return false
		}
		r.members.proposed = confMark{last + 1, st.GetTerm()}
		r.members.mergeSince = n.live.ticks
		n.touch(r)
		n.log.Warn("cluster: removing a member that does not say it holds the group to merge", "node", n.cfg.ID, "group", r.group,
			"member", missing[0], "merging", right)
		return true
	}
	c := &command.Command{Kind: command.KindMergeGroup, Account: sp.Account, Table: sp.Table, Group: right, Key: sp.HighPartitionKey}
	if err := r.rawNode().Propose(c.Append(nil)); err != nil {
		return false
	}
	r.members.proposed = confMark{last + 1, st.GetTerm()}
	n.touch(r)
	n.log.Info("cluster: merging a frozen range group", "node", n.cfg.ID, "group", r.group, "merging", right, "at", sp.HighPartitionKey)
	return true
}

// groupAfter returns the group the catalog no longer names whose span
// this store holds, starting where sp ends, of sp's table (0 if none),
// and whether it holds it frozen.
func (n *Node) groupAfter(sp partition.Span) (group uint64, frozen bool) {
	out, err := n.st().OutsideCatalog()
	if err != nil {
		return 0, false
	}
	for _, g := range out {
		if endsWhereStarts(sp, g.Span) {
			return g.Group, g.Frozen
		}
	}
	return 0, false
}

// applyFreeze applies the freeze of the replica's span (kind 12), on the
// apply goroutine.
func (r *replica) applyFreeze(ctx context.Context, s *partition.Store) error {
	if err := s.FreezeGroupSpan(ctx, r.group); err != nil {
		return err
	}
	r.n.log.Info("cluster: range group frozen, to be merged", "node", r.n.cfg.ID, "group", r.group)
	return nil
}

// applyMerge applies the merge of frozen group c.Group into the
// replica's span (kind 13), on the apply goroutine. A store that does
// not hold that group frozen stops the node: its replica of the group
// would serve keys whose data it lacks (the leader proposes the merge
// only once every member says it holds it, so this is a bug or a damaged
// store).
func (r *replica) applyMerge(ctx context.Context, s *partition.Store, c command.Command) error {
	err := s.MergeGroupSpan(ctx, r.group, c.Group, c.Key)
	if errors.Is(err, partition.ErrMergeUnready) {
		return fmt.Errorf("cluster: group %d cannot merge group %d: %w", r.group, c.Group, err)
	}
	if err != nil {
		return err
	}
	r.n.hosts.add(hostChange{group: c.Group, merged: true})
	r.n.log.Info("cluster: range group merged", "node", r.n.cfg.ID, "group", r.group, "merged", c.Group, "at", c.Key)
	return nil
}

// MergeTable merges the range of a table that starts at PartitionKey at
// into the range before it, from the system group's ready leader, which
// records the merge (the groups' logs then merge their spans). Both
// ranges' groups must have their members on the same nodes, as their
// leaseholders report them, all voters (SetGroupVoters moves them): the
// left group takes the right one's data where it is. A key where no
// range starts, and ranges whose members are elsewhere, are
// ErrBadPlacement.
func (n *Node) MergeTable(ctx context.Context, account, table, at string) error {
	return n.mergeTable(ctx, account, table, at, nil)
}

// mergeTable is MergeTable, checking the members against stats, the
// leaseholders' reports, gathered anew when nil.
func (n *Node) mergeTable(ctx context.Context, account, table, at string, stats []RangeStatus) error {
	ranges, err := n.st().TableRanges(account, table)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(ranges, func(tg partition.TableGroup) bool { return tg.Group.Start == at })
	switch {
	case len(ranges) == 0:
		return fmt.Errorf("%w: table %s has no range group (the system group replicates it)", ErrBadPlacement, table)
	case i < 0:
		return fmt.Errorf("%w: no range of table %s starts at %q", ErrBadPlacement, table, at)
	case i == 0:
		return fmt.Errorf("%w: the first range of table %s has none before it to merge into", ErrBadPlacement, table)
	}
	if stats == nil {
		for rs := range n.rangeStats(ctx) {
			if rs.Group == ranges[i-1].Group.ID || rs.Group == ranges[i].Group.ID {
				stats = append(stats, rs)
			}
		}
	}
	if err := mergeable(stats, ranges[i-1], ranges[i]); err != nil {
		return err
	}
	_, err = n.Store().write(ctx, &command.Command{Kind: command.KindMergeRange, Account: account, Table: table, Group: ranges[i-1].Group.ID, Key: at}, 0)
	return err
}

// tableGroupIDs lists the range groups of a live table that its store
// holds a span of, or its catalog names: those its drop ends.
func (n *Node) tableGroupIDs(s *partition.Store, account, table string) []uint64 {
	ranges, _ := s.TableRanges(account, table)
	var ids []uint64
	for _, tg := range ranges {
		ids = append(ids, tg.Group.ID)
	}
	outside, _ := s.OutsideCatalog()
	for _, g := range outside {
		if g.Span.Account == account && strings.EqualFold(g.Span.Table, table) && !slices.Contains(ids, g.Group) {
			ids = append(ids, g.Group)
		}
	}
	return ids
}

// spanWorkDue says whether the group's leader has work to do on its span.
func (r *replica) spanWorkDue() bool {
	w, _, _ := r.spanDue()
	return w != spanSettled
}

// mergeable checks, from their leaseholders' reports (stats), that two
// ranges' groups have their members on the same nodes, all voters, as
// their descriptors name them.
func mergeable(stats []RangeStatus, left, right partition.TableGroup) error {
	report := func(g uint64) (RangeStatus, bool) {
		i := slices.IndexFunc(stats, func(rs RangeStatus) bool { return rs.Group == g })
		if i < 0 {
			return RangeStatus{}, false
		}
		return stats[i], true
	}
	l, lok := report(left.Group.ID)
	r, rok := report(right.Group.ID)
	switch {
	case !lok || !rok:
		return fmt.Errorf("%w: no leaseholder reports range group %d or %d: ask again", ErrBadPlacement, left.Group.ID, right.Group.ID)
	case !sameNodes(left.Group.Voters, right.Group.Voters):
		return fmt.Errorf("%w: range group %d is named on nodes %v, the range before it on %v: move it there first",
			ErrBadPlacement, right.Group.ID, right.Group.Voters, left.Group.Voters)
	case !sameNodes(l.Replicas, left.Group.Voters) || !sameNodes(r.Replicas, right.Group.Voters) || !l.settled() || !r.settled():
		return fmt.Errorf("%w: the members of range groups %d (%v) and %d (%v) are still moving to nodes %v: ask again",
			ErrBadPlacement, left.Group.ID, l.Members, right.Group.ID, r.Members, left.Group.Voters)
	}
	return nil
}
