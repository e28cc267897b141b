package cluster

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/cluster/transport"
	"github.com/tabuladb/tabula/partition"
)

// What the nodes say to each other about merges (group-0 messages), and
// how a node lets go of what a merge leaves behind (range_merge.go).

// Group-0 messages about merges (docs/transport.md): a leader with a
// frozen group to merge asks its voters' nodes whether their stores hold
// it frozen (msgMergeCheck), and a node answers with those it does
// (msgFrozenHere); a node with an orphan asks whether it was merged
// (msgMergedCheck, its Context encoded by appendOrphan), and the merging
// group's leader says so (msgMerged). The Context of the others is
// (uvarint group, uvarint group) pairs, as the membership messages':
// the frozen group, and 0 or the group it is next to.
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
// sp's key, has its keys held by a group this node leads (ready or
// dormant), whose span is settled, and of which node is no member. It
// runs on the loop.
func (n *Node) holdsMerged(group uint64, sp partition.Span, node uint64) bool {
	st := n.st()
	if _, named, err := st.GroupTable(group); named || err != nil || !n.catalogKnew(group) {
		return false
	}
	tg, err := st.TableRangeFor(sp.Account, sp.Table, sp.LowPartitionKey)
	if err != nil || tg.Group.ID == 0 || tg.Group.ID == group {
		return false
	}
	r := n.replicaOf(tg.Group.ID)
	if r == nil || !r.holdsLease() || memberOf(r.conf, node) != 0 {
		return false
	}
	w, _, own := r.spanDue()
	return w == spanSettled && own.Contains(sp.LowPartitionKey)
}

// heardMerged drops the orphans a peer says it merged. An answer to a
// merge question names the child it saw started (heardMergeCheck); it
// counts only while this node's catalog, too, has that child hold the
// orphan's first key: a peer whose catalog is ahead may name the range
// after the merging group once the catalog has merged the child back,
// which says nothing of the orphan's merge.
func (n *Node) heardMerged(m *raftpb.Message) {
	ok := memberPairs(m.GetContext(), func(group, child uint64) {
		if child == 0 || n.childHolds(child, group) {
			n.hosts.add(hostChange{group: group, orphan: true})
		}
	})
	if !ok {
		n.log.Warn("cluster: a malformed merge answer is ignored", "node", n.cfg.ID, "from", m.GetFrom())
	}
}

// heardMergeCheck answers a peer's question about frozen groups, each
// named with the group that is to merge it (0 from a node that predates
// that): those its store holds frozen, and as merged those it does not
// while a group the catalog split off the merging one after its span
// has started here. That child starts only at the split in the merging
// group's log, which comes after the merge; so the asker, which leads
// the merging group, holds its frozen span as a leftover: its replica
// skipped the merge in a snapshot made past it. It drops the span as an
// orphan (dropOrphan checks again).
func (n *Node) heardMergeCheck(m *raftpb.Message) {
	ok := memberPairs(m.GetContext(), func(group, into uint64) {
		if frozen, err := n.st().GroupFrozen(group); err == nil && frozen {
			n.live.frozenHere.add(m.GetFrom(), group, 0)
		} else if tg, ok, err := n.st().GroupTable(into); err == nil && ok && into != 0 {
			if child, started := n.rangeAfter(tg); started {
				n.live.merged.add(m.GetFrom(), group, child)
			}
		}
	})
	if !ok {
		n.log.Warn("cluster: a malformed merge question is ignored", "node", n.cfg.ID, "from", m.GetFrom())
	}
}

// childHolds says whether the catalog has group child hold the first key
// of group's span, as this store records it.
func (n *Node) childHolds(child, group uint64) bool {
	sp, ok, err := n.st().GroupSpan(group)
	if err != nil || !ok {
		return false
	}
	tg, err := n.st().TableRangeFor(sp.Account, sp.Table, sp.LowPartitionKey)
	return err == nil && tg.Group.ID == child && tg.Group.Start == sp.LowPartitionKey
}

// heardFrozenHere records a peer's word that its store holds groups
// frozen, with the tick: a leader counts only the words it heard since it
// began its merge, for a peer's frozen span goes when the peer's replica
// merges it. (A node whose replica of the merging group skipped the merge
// in a snapshot made past it holds the span still, a leftover; leading
// that group later, it counted the words it had heard before and
// proposed the merge again, and every replica that had merged stopped
// its node: chaos merges mode, seed 1478.) A pair that names a group this
// node leads, unasked, is a merge hint: the peer's replica of that group
// ends where the frozen one starts.
func (n *Node) heardFrozenHere(m *raftpb.Message) {
	from := m.GetFrom()
	ok := memberPairs(m.GetContext(), func(group, into uint64) {
		if n.live.frozen[from] == nil {
			n.live.frozen[from] = map[uint64]uint64{}
		}
		n.live.frozen[from][group] = n.live.ticks
		if r := n.replicaOf(into); into != 0 && r != nil {
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

// forgetMergedInto drops the groups the catalog no longer names whose
// span sp, just ingested into group into from a snapshot, holds: merged
// where the snapshot was taken while this node's replica of the group
// that took them was not a member (it was removed while it did not hold
// them frozen, and added back), or lagged. Their records go, and their raft
// logs, or the tombstones of members retired here. It runs on the apply
// goroutine.
//
// The group whose span was ingested (into) is kept whatever the catalog
// says: a group the catalog merged away goes on until its own log freezes
// it and the group before it takes its span, and a member of it that
// dropped itself on a snapshot from its live leader would hold that
// freeze back for good (the leader waits for every live voter).
//
// A group the catalog does not name yet (catalogKnew) is not one it
// stopped naming: a split child whose span this node has (the parent's
// log split it here, or a snapshot of the child brought it) before the
// system group's record of the split is applied here. Dropping it had a
// member that acknowledged a snapshot start over empty under the same
// id: its leader, which counted the snapshot, sent it a commit index past
// its log and the node stopped (chaos seed 4, moves).
func (n *Node) forgetMergedInto(into uint64, sp partition.Span) error {
	outside, err := n.st().OutsideCatalog()
	if err != nil {
		return err
	}
	for _, g := range outside {
		if g.Group == into || !n.catalogKnew(g.Group) {
			continue // the group itself, or not named yet rather than merged
		}
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
	return err == nil && tg.Group.ID != 0 && tg.Group.ID != g.Group && !n.hostsGroup(tg.Group.ID)
}

// dropOrphan drops an orphan that a node says was merged, checked again
// on the loop (which hosts groups): its replica, its raft log, its data
// and records. Not while a group hosted here that ends where the orphan
// starts lags its leader: the orphan's keys went to a group split off
// that one after it merged them, and its replica here may still have
// the merge to apply, which takes the orphan's record (dropped at the
// word of the split's child, the merge stopped the node;
// TestOrphanDropWaitsForTheMergingReplica). Caught up with its leader,
// asked after that word came, it is past the merge.
func (n *Node) dropOrphan(group uint64) error {
	outside, err := n.st().OutsideCatalog()
	if err != nil {
		return err
	}
	i := slices.IndexFunc(outside, func(g partition.GroupSpanOf) bool { return g.Group == group })
	if i < 0 || !n.catalogKnew(group) || !n.orphan(outside[i]) {
		return nil // merged here meanwhile, or its group came here
	}
	if n.waitsOnMerge(n.orphanWaits, group, outside[i].Span, "an orphan's drop") {
		return nil // asked again at the next look
	}
	if err := n.dropMergedCopy(group); err != nil {
		return fmt.Errorf("cluster: drop orphan range group %d: %w", group, err)
	}
	n.log.Info("cluster: merged range group dropped: the group that merged it is not here", "node", n.cfg.ID, "group", group)
	return nil
}

// dropMergedCopy drops what the node holds of a group merged away that
// no group of the node will merge: its replica, its raft log, and its
// span record and the data of it no live group holds (dropOrphanSpan).
func (n *Node) dropMergedCopy(group uint64) error {
	if r := n.replicaOf(group); r != nil {
		n.unhost(r, errMoved(fmt.Sprintf("range group %d was merged into the range before it", group)))
	}
	return n.onApply(func() error {
		if err := n.cfg.Log.DeleteGroup(group); err != nil {
			return err
		}
		return n.dropOrphanSpan(group)
	})
}

// A group merged away whose span a node still holds, where a group
// hosted there records that its log merged it (partition.Store.GroupMerged:
// the merges of that group's own log, not those of the groups it merged),
// is a leftover: that group's replica there is past the merge, which it
// skipped in a snapshot made past it (the snapshot carries the record),
// and only that group's log merges it. A later replica of that group
// there starts from a snapshot at or past its addition, past the merge
// too. So the node drops it at once, data and all but the keys a live
// group holds, without waiting for the merging group's children or
// asking its peers, as the paths that find a leftover without the
// record must (splitPending, dropOrphan, the merge's word counting).

// mergedHere returns a group hosted here whose span record says it
// merged group, 0 for none: a record it cannot read says nothing, and
// nothing is dropped for it.
func (n *Node) mergedHere(group uint64) uint64 {
	if n.ignoreMergeRecords {
		return 0
	}
	s := n.st()
	merged := func(id uint64) bool {
		ids, err := s.GroupMerged(id)
		return id != group && err == nil && slices.Contains(ids, group)
	}
	for _, r := range n.replicaList {
		if merged(r.group) {
			return r.group
		}
	}
	var by uint64
	n.replicasMu.RLock()
	err := n.eachUnloaded(func(id uint64, _ unloadedReplica) bool {
		if merged(id) {
			by = id
		}
		return by == 0
	})
	n.replicasMu.RUnlock()
	if err != nil {
		n.fail(err)
		return 0
	}
	return by
}

// dropLeftover drops a leftover that a span install or noteMerges
// found, checked again on the loop: still recorded here and outside the
// catalog, a group hosted here recording its merge, and no install of it
// under way.
func (n *Node) dropLeftover(group uint64) error {
	if recorded, err := n.st().SpanRecorded(group); err != nil || !recorded {
		return err // dropped already, by this or another path
	}
	by := n.mergedHere(group)
	if by == 0 || !n.catalogKnew(group) {
		return nil
	}
	if _, named, err := n.st().GroupTable(group); named || err != nil {
		return err
	}
	if r := n.replicas[group]; r != nil && r.install != nil { // an unloaded one has none
		return nil // looked at again at the next look
	}
	if err := n.dropMergedCopy(group); err != nil {
		return fmt.Errorf("cluster: drop leftover range group %d: %w", group, err)
	}
	n.log.Info("cluster: merged range group dropped: a group here records that it merged it", "node", n.cfg.ID, "group", group, "by", by)
	return nil
}

// dropOrphanSpan empties an orphan's span and forgets its record, on the
// apply goroutine. The keys of it a live group of the node holds
// (liveHolders: a group that took part of the span, its snapshot
// ingested here, or a later split's child moved here) are that group's
// and stay; the rest go. Emptying the whole span lost such a group's
// entities. On the apply goroutine no split, merge or ingest runs beside
// it; each part is emptied as an ingest, so a crash between parts leaves
// the orphan's record over what is left, and its drop is asked for again.
func (n *Node) dropOrphanSpan(group uint64) error {
	s := n.st()
	sp, ok, err := s.GroupSpan(group)
	if err != nil {
		return err
	}
	if ok { // else the table is gone, and its keys with it
		holders, err := n.liveHolders(s, group, sp)
		if err != nil {
			return err
		}
		parts := []partition.Span{sp}
		for _, h := range holders {
			parts = partition.SpanMinus(parts, h.Span)
		}
		for _, p := range parts {
			if err := s.EmptySpan(group, p); err != nil {
				return fmt.Errorf("cluster: empty [%q, %q) of orphan range group %d: %w", p.LowPartitionKey, p.HighPartitionKey, group, err)
			}
		}
		if len(holders) > 0 {
			n.log.Info("cluster: an orphan's keys that other groups hold kept", "node", n.cfg.ID, "group", group, "holder", holders[0].Group)
		}
	}
	return s.ForgetGroup(group)
}

// mergeHint is a follower's word that it holds a frozen group next to a
// group this node leads.
type mergeHint struct {
	group, at uint64
}

// hintedMerge returns the frozen group a follower said lately that it holds
// next to group (0 if none): hints older than two rounds of them are
// stale.
func (n *Node) hintedMerge(group uint64) uint64 {
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
		if !n.catalogKnew(g.Group) {
			continue // a split's child the catalog here has not recorded yet
		}
		if n.mergedHere(g.Group) != 0 {
			n.hosts.add(hostChange{group: g.Group, leftover: true})
			continue
		}
		if n.superseded(g.Group, g.Span) {
			// Left by a crash after a snapshot of the group that took
			// its keys went in, before the group was dropped
			// (forgetMergedInto, or a refused ingest's drop): hosted,
			// or its record alone.
			n.hosts.add(hostChange{group: g.Group, superseded: true})
			continue
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
		n.loadWhere(func(id uint64, _ unloadedReplica) bool {
			sp, ok := n.groupSpan(id)
			return ok && endsWhereStarts(sp, g.Span)
		})
		for _, r := range n.replicaList {
			sp, ok := n.groupSpan(r.group)
			lead := transport.NodeOf(r.leader.Load())
			if r.group != systemGroup && ok && endsWhereStarts(sp, g.Span) && lead != 0 && lead != n.cfg.ID {
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
	if n.hostsGroup(group) {
		return nil
	}
	if st, err := n.cfg.Log.Group(group); err != nil || !st.Replica().Removed {
		return err
	}
	if frozen, err := n.st().GroupFrozen(group); err != nil || frozen {
		return err // its data is the merge's (or an orphan's, dropped as such)
	}
	if err := n.cfg.Log.DeleteGroup(group); err != nil {
		return fmt.Errorf("cluster: forget retired range group %d: %w", group, err)
	}
	if recorded, err := n.st().SpanRecorded(group); err != nil || !recorded {
		return err
	}
	return n.st().ForgetGroup(group)
}

// endsWhereStarts says whether span sp ends where span next of the same
// table starts: the group of sp is the one that merges next's.
func endsWhereStarts(sp, next partition.Span) bool {
	return sp.HighPartitionKey == next.LowPartitionKey && sp.Account == next.Account && strings.EqualFold(sp.Table, next.Table)
}
