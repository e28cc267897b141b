package cluster

import (
	"context"
	"encoding/binary"
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
// step 5), the right one's group (B) into the left one's (A), once the
// placement controller has put B's members on A's nodes:
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
// live voters are caught up, and no longer compacts its log.

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
	tg, named := st.GroupTable(r.group)
	if !named {
		// The group's id is the index of the system group's entry that
		// made it: until this node has applied that, its catalog does
		// not know the group yet (a split's child, started here by its
		// parent's log). Past it, the catalog merged it away.
		if r.n.applied.Load() < r.group {
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
	case sp.HighPartitionKey != "" && sp.HighPartitionKey == tg.End && (st.HasFrozen() || r.n.mergeHint(r.group) != 0) && r.unbornAfter(tg, sp):
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
	next, err := n.st().TableRangeFor(tg.Account, tg.Table, tg.End)
	if err != nil || next.Group.ID == 0 || next.Group.Start != tg.End || n.group(next.Group.ID) != nil || n.st().SpanRecorded(next.Group.ID) {
		return false
	}
	_, frozen := n.groupAfter(sp)
	return frozen || n.mergeHint(r.group) != 0
}

// maybeFreeze proposes, on the ready leader of a group the catalog no
// longer names (merged into the range before it), the freeze of its
// span, once every live voter is within catchUpSlack entries of its log:
// a frozen group sends no snapshot, so a follower far behind would never
// reach the freeze. It reports whether it proposed.
func (r *replica) maybeFreeze(st raft.Status, sp partition.Span) bool {
	last, err := r.rlog.LastIndex()
	if err != nil {
		return false
	}
	for id, pr := range st.Progress {
		if !pr.IsLearner && r.n.isLive(transport.NodeOf(id)) && pr.Match+catchUpSlack < last {
			return false
		}
	}
	c := &command.Command{Kind: command.KindFreezeGroup, Account: sp.Account, Table: sp.Table}
	if err := r.rn.Propose(c.Append(nil)); err != nil {
		return false
	}
	r.members.proposed = confMark{last + 1, st.GetTerm()}
	r.n.touch(r)
	r.n.log.Info("cluster: freezing a range group merged into the one before it", "node", r.n.cfg.ID, "group", r.group,
		"table", sp.Table, "low", sp.LowPartitionKey)
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
		right = n.mergeHint(r.group) // a follower holds it
	}
	if right == 0 || len(r.conf.GetLearners()) > 0 {
		return false // not frozen anywhere known yet; or learners to remove first (reconcile)
	}
	var missing, holding []uint64
	for _, id := range r.conf.GetVoters() {
		switch node := transport.NodeOf(id); {
		case node == n.cfg.ID && frozen, right != 0 && n.live.frozen[node][right]:
			holding = append(holding, id)
		case node != n.cfg.ID:
			missing = append(missing, id)
			if right != 0 {
				n.live.mergeChecks.add(node, right, 0)
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
		if err := r.rn.ProposeConfChange(cc); err != nil {
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
	if err := r.rn.Propose(c.Append(nil)); err != nil {
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
		if g.Span.LowPartitionKey == sp.HighPartitionKey && g.Span.Account == sp.Account && strings.EqualFold(g.Span.Table, sp.Table) {
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

// Group-0 messages about merges (docs/transport.md): a leader with a
// frozen group to merge asks its voters' nodes whether their stores hold
// it frozen (msgMergeCheck), and a node answers with those it does
// (msgFrozenHere); a node with an orphan asks whether it was merged
// (msgMergedCheck), and a node that merged it says so (msgMerged). The
// Context of each is (uvarint group, uvarint group) pairs, as the
// membership messages': the frozen group, and 0 or the group it is next
// to.
const (
	msgMergeCheck  = raftpb.MessageType_MsgTransferLeader
	msgFrozenHere  = raftpb.MessageType_MsgTimeoutNow
	msgMergedCheck = raftpb.MessageType_MsgSnapStatus
	msgMerged      = raftpb.MessageType_MsgUnreachable
)

// appendOrphan appends an orphan to a msgMergedCheck's Context: uvarint
// group, then the account, the table and the span's first PartitionKey,
// each as uvarint length and bytes.
func appendOrphan(dst []byte, group uint64, sp partition.Span) []byte {
	dst = binary.AppendUvarint(dst, group)
	for _, s := range []string{sp.Account, sp.Table, sp.LowPartitionKey} {
		dst = binary.AppendUvarint(dst, uint64(len(s)))
		dst = append(dst, s...)
	}
	return dst
}

// orphans decodes a msgMergedCheck's Context; false if it is malformed.
func orphans(ctx []byte, fn func(group uint64, sp partition.Span)) bool {
	for len(ctx) > 0 {
		g, k := binary.Uvarint(ctx)
		if k <= 0 {
			return false
		}
		ctx = ctx[k:]
		var sp partition.Span
		for _, dst := range []*string{&sp.Account, &sp.Table, &sp.LowPartitionKey} {
			l, k := binary.Uvarint(ctx)
			if k <= 0 || l > uint64(len(ctx)-k) {
				return false
			}
			*dst, ctx = string(ctx[k:k+int(l)]), ctx[k+int(l):]
		}
		fn(g, sp)
	}
	return true
}

// heardMergedCheck answers a peer's question about its orphans: those
// whose keys a group this node leads holds, with its span settled, and
// of which the peer is no member (so the data the orphan keeps is needed
// nowhere: the merge is applied here, and a member the group adds the
// peer as later starts from a snapshot at or past its addition).
func (n *Node) heardMergedCheck(m *raftpb.Message) {
	ok := orphans(m.GetContext(), func(group uint64, sp partition.Span) {
		if n.holdsMerged(group, sp, m.GetFrom()) {
			n.live.merged.add(m.GetFrom(), group, 0)
		}
	})
	if !ok {
		n.log.Warn("cluster: a malformed merge question is ignored", "node", n.cfg.ID, "from", m.GetFrom())
	}
}

// holdsMerged says whether group, merged away with a span that starts at
// sp's key, has its keys held by a group this node leads, ready, whose
// span is settled, and of which node is no member. It runs on the loop.
func (n *Node) holdsMerged(group uint64, sp partition.Span, node uint64) bool {
	st := n.st()
	if _, named := st.GroupTable(group); named || n.applied.Load() < group {
		return false
	}
	tg, err := st.TableRangeFor(sp.Account, sp.Table, sp.LowPartitionKey)
	if err != nil || tg.Group.ID == 0 || tg.Group.ID == group {
		return false
	}
	r := n.replicas[tg.Group.ID]
	if r == nil || !r.ready.Load() || memberOf(r.conf, node) != 0 {
		return false
	}
	w, _, own := r.spanDue()
	return w == spanSettled && own.Contains(sp.LowPartitionKey)
}

// heardMerged drops the orphans a peer says it merged.
func (n *Node) heardMerged(m *raftpb.Message) {
	ok := memberPairs(m.GetContext(), func(group, _ uint64) {
		n.hosts.add(hostChange{group: group, orphan: true})
	})
	if !ok {
		n.log.Warn("cluster: a malformed merge answer is ignored", "node", n.cfg.ID, "from", m.GetFrom())
	}
}

// heardMergeCheck answers a peer's question about frozen groups.
func (n *Node) heardMergeCheck(m *raftpb.Message) {
	ok := memberPairs(m.GetContext(), func(group, _ uint64) {
		if frozen, err := n.st().GroupFrozen(group); err == nil && frozen {
			n.live.frozenHere.add(m.GetFrom(), group, 0)
		}
	})
	if !ok {
		n.log.Warn("cluster: a malformed merge question is ignored", "node", n.cfg.ID, "from", m.GetFrom())
	}
}

// heardFrozenHere records a peer's word that its store holds groups
// frozen: for good, since a frozen span stays frozen until merged. A pair
// that names a group this node leads, unasked, is a merge hint: the
// peer's replica of that group ends where the frozen one starts.
func (n *Node) heardFrozenHere(m *raftpb.Message) {
	from := m.GetFrom()
	ok := memberPairs(m.GetContext(), func(group, into uint64) {
		if n.live.frozen[from] == nil {
			n.live.frozen[from] = map[uint64]bool{}
		}
		n.live.frozen[from][group] = true
		if r := n.replicas[into]; into != 0 && r != nil {
			n.live.mergeHints[into] = mergeHint{group: group, at: n.live.ticks}
			r.quiesced.Store(false)
		}
	})
	if !ok {
		n.log.Warn("cluster: a malformed merge answer is ignored", "node", n.cfg.ID, "from", from)
	}
}

// mergedAway ends the node's replica of a group merged into another (the
// store dropped its records): its raft log goes, and the requests
// waiting on it are told to ask again (they are routed to the group that
// holds the keys now). It runs on the loop.
func (n *Node) mergedAway(group uint64) error {
	for _, groups := range n.live.frozen {
		delete(groups, group)
	}
	for into, h := range n.live.mergeHints {
		if h.group == group {
			delete(n.live.mergeHints, into)
		}
	}
	return n.dropGroup(group, errMoved(fmt.Sprintf("range group %d was merged into the range before it", group)))
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
	if err := n.mergeable(ctx, ranges[i-1], ranges[i]); err != nil {
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

// forgetMergedInto drops the groups the catalog no longer names whose
// span sp, just ingested from a snapshot, holds: merged where the
// snapshot was taken while this node's replica of the group that took
// them was not a member (it was removed while it did not hold them
// frozen, and added back), or lagged. Their records go, and their raft
// logs, or the tombstones of members retired here. It runs on the apply
// goroutine.
func (n *Node) forgetMergedInto(sp partition.Span) error {
	outside, err := n.st().OutsideCatalog()
	if err != nil {
		return err
	}
	for _, g := range outside {
		if g.Span.Account == sp.Account && strings.EqualFold(g.Span.Table, sp.Table) && sp.Contains(g.Span.LowPartitionKey) {
			if err := n.st().ForgetGroup(g.Group); err != nil {
				return err
			}
			n.hosts.add(hostChange{group: g.Group, merged: true})
		}
	}
	return nil
}

// A replica of a group merged away on a node that does not host the
// group its keys go to (an orphan: the merging group removed this node's
// member while it waited, or the replica lagged behind the freeze while
// its group was dropped elsewhere) holds data no group of the node will
// take. Once that group's leader says it has made the merge and counts
// no member on this node (msgMergedCheck, msgMerged), the node drops it,
// data and all: a member the group adds here later starts from a
// snapshot at or past its addition, so past the merge. Not before: until
// then its copy may be the one the merge takes.

// orphan says whether a group merged away in the catalog has its keys
// go to a group this node does not host.
func (n *Node) orphan(g partition.GroupSpanOf) bool {
	tg, err := n.st().TableRangeFor(g.Span.Account, g.Span.Table, g.Span.LowPartitionKey)
	return err == nil && tg.Group.ID != 0 && tg.Group.ID != g.Group && n.group(tg.Group.ID) == nil
}

// dropOrphan drops an orphan that a node says was merged, checked again
// on the loop (which hosts groups): its replica, its raft log, its data
// and records.
func (n *Node) dropOrphan(group uint64) error {
	outside, err := n.st().OutsideCatalog()
	if err != nil {
		return err
	}
	i := slices.IndexFunc(outside, func(g partition.GroupSpanOf) bool { return g.Group == group })
	if i < 0 || n.applied.Load() < group || !n.orphan(outside[i]) {
		return nil // merged here meanwhile, or its group came here
	}
	if r := n.replicas[group]; r != nil {
		n.unhost(r, errMoved(fmt.Sprintf("range group %d was merged into the range before it", group)))
	}
	err = n.onApply(func() error {
		if err := n.cfg.Log.DeleteGroup(group); err != nil {
			return err
		}
		if err := n.emptyGroupSpan(group, true); err != nil {
			return err
		}
		return n.st().ForgetGroup(group)
	})
	if err != nil {
		return fmt.Errorf("cluster: drop orphan range group %d: %w", group, err)
	}
	n.log.Info("cluster: merged range group dropped: the group that merged it is not here", "node", n.cfg.ID, "group", group)
	return nil
}

// mergeHint is a follower's word that it holds a frozen group next to a
// group this node leads.
type mergeHint struct {
	group, at uint64
}

// mergeHint returns the frozen group a follower said lately that it holds
// next to group (0 if none): hints older than two rounds of them are
// stale.
func (n *Node) mergeHint(group uint64) uint64 {
	h, ok := n.live.mergeHints[group]
	if !ok || n.live.ticks-h.at > 2*uint64(n.checkEveryTicks()) {
		return 0
	}
	return h.group
}

// noteMerges tells the leaders of the groups this node hosts that end
// where a frozen group it holds starts: a leader that does not hold the
// frozen group itself learns of it so (merge hints), and hands its lease
// to a member that does. For an orphan (a group merged away in the
// catalog, frozen here or left behind before its freeze, whose keys go
// to a group not hosted here), it asks the nodes the catalog names for
// that group whether they merged it. It runs on the loop, every
// checkEveryTicks ticks while the store holds a frozen group, ten times
// less often otherwise.
func (n *Node) noteMerges() {
	outside, err := n.st().OutsideCatalog()
	if err != nil {
		return
	}
	asks := map[uint64][]byte{}
	defer func() {
		var out []*raftpb.Message
		for node, ctx := range asks {
			out = append(out, &raftpb.Message{Type: msgMergedCheck.Enum(), From: proto.Uint64(n.cfg.ID), To: proto.Uint64(node), Context: ctx})
		}
		if len(out) > 0 {
			n.sendGroup(0, out)
		}
	}()
	for _, g := range outside {
		if n.applied.Load() < g.Group {
			continue // a split's child the catalog here has not recorded yet
		}
		if tg, err := n.st().TableRangeFor(g.Span.Account, g.Span.Table, g.Span.LowPartitionKey); err == nil && n.orphan(g) {
			for _, v := range tg.Group.Voters {
				if v != n.cfg.ID {
					asks[v] = appendOrphan(asks[v], g.Group, g.Span)
				}
			}
		}
		if !g.Frozen {
			continue
		}
		for _, r := range n.replicaList {
			sp, ok := n.groupSpan(r.group)
			lead := transport.NodeOf(r.leader.Load())
			if r.group != systemGroup && ok && sp.HighPartitionKey == g.Span.LowPartitionKey && sp.Account == g.Span.Account &&
				strings.EqualFold(sp.Table, g.Span.Table) && lead != 0 && lead != n.cfg.ID {
				n.live.frozenHere.add(lead, g.Group, r.group)
			}
		}
	}
}

// forgetRetired drops what a node keeps of a group merged away whose
// member here was retired before it froze: the tombstone in its raft
// log (the group adds no member again once the catalog merged it, so
// no raft id of it can come back) and its emptied span record. It runs
// on the apply goroutine.
func (n *Node) forgetRetired(group uint64) error {
	if n.group(group) != nil || !n.cfg.Log.Group(group).Replica().Removed {
		return nil
	}
	if frozen, err := n.st().GroupFrozen(group); err != nil || frozen {
		return err // its data is the merge's (or an orphan's, dropped as such)
	}
	if err := n.cfg.Log.DeleteGroup(group); err != nil {
		return fmt.Errorf("cluster: forget retired range group %d: %w", group, err)
	}
	if !n.st().SpanRecorded(group) {
		return nil
	}
	return n.st().ForgetGroup(group)
}

// mergeable checks, from their leaseholders' reports, that two ranges'
// groups have their members on the same nodes, all voters, as their
// descriptors name them.
func (n *Node) mergeable(ctx context.Context, left, right partition.TableGroup) error {
	stats := n.ranges(ctx)
	if n.cfg.RangeStats != nil {
		stats = n.cfg.RangeStats(ctx)
	}
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
	case !sameNodes(l.Members, left.Group.Voters) || !sameNodes(r.Members, right.Group.Voters) || len(l.Learners)+len(r.Learners) > 0:
		return fmt.Errorf("%w: the members of range groups %d (%v) and %d (%v) are still moving to nodes %v: ask again",
			ErrBadPlacement, left.Group.ID, l.Members, right.Group.ID, r.Members, left.Group.Voters)
	}
	return nil
}
