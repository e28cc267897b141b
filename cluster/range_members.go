package cluster

import (
	"encoding/binary"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/cluster/transport"
	"github.com/tabuladb/tabula/partition"
)

// A range group's members move. The table's descriptor in the catalog
// (partition.RangeGroup, replicated by the system group) names the nodes
// that are to be its voters; the group's own log decides who its members
// are at any moment, and its leader moves them toward the descriptor one
// configuration change at a time (reconcile): a node named and without a
// member is added as a learner, which catches up from a span snapshot;
// a learner caught up is promoted; then the members of nodes no longer
// named are removed, the leader handing its lease to another voter
// first if it is one of them. Adding before removing keeps the group at
// its size through a move.
//
// A member added to a group has a raft id of its own (transport.
// ReplicaID): its node's id with, above, the index of the configuration
// change that adds it. So a node added again after its removal is never
// taken for its old member, whose messages may still be in flight, and
// any replica that has seen the log past that index and does not find a
// member in its configuration knows it was removed.
//
// A node hosts a member when the first message for it arrives
// (hostMember), if its catalog knows the group; a member that applies
// its own removal, or that any other member says is removed, is retired:
// its raft log gives way to a tombstone (raftlog.RemoveReplica) so the id
// is never used again on the node, and its span is emptied.

// rangeMembers is a range group replica's membership work; loop-owned.
type rangeMembers struct {
	// proposed is the last configuration change this replica proposed
	// as the leader.
	proposed confMark
	// seen is the highest log index whose configuration changes are in
	// conf: the last committed entry the loop handed on.
	seen uint64
	// transferAt is the tick of the last lease handover asked, so that
	// a leader leaving its group asks once per election timeout.
	transferAt uint64
	// silent counts the ticks the replica has been awake without word
	// from a leader of its group (heard is set by the leader's appends,
	// heartbeats and snapshots), to check now and then whether it was
	// removed: a removed follower loses its leader and campaigns, but a
	// removed learner never campaigns and keeps the leader it knew.
	silent int
	heard  bool
	// mergeSince is the tick the leader found a merge or a freeze to
	// make (range_merge.go), 0 when it has none.
	mergeSince uint64
}

// memberKey names a member of a group.
type memberKey struct{ group, id uint64 }

// memberNotes are the group-0 membership messages of one tick, by the
// node they go to: questions (msgMemberCheck) or answers
// (msgMembersRemoved) about members of that node.
type memberNotes map[uint64]map[memberKey]bool

func (m memberNotes) add(node, group, id uint64) {
	if m[node] == nil {
		m[node] = map[memberKey]bool{}
	}
	m[node][memberKey{group, id}] = true
}

// hasMember says whether raft id id is a voter or learner in cs.
func hasMember(cs *raftpb.ConfState, id uint64) bool {
	return slices.Contains(cs.GetVoters(), id) || slices.Contains(cs.GetLearners(), id)
}

// memberOf returns the raft id of node's voter or learner in cs, 0 if none.
func memberOf(cs *raftpb.ConfState, node uint64) uint64 {
	for _, id := range slices.Concat(cs.GetVoters(), cs.GetLearners()) {
		if transport.NodeOf(id) == node {
			return id
		}
	}
	return 0
}

// confState returns the group's configuration as the loop last applied
// it, for any goroutine; the caller must not change it.
func (r *replica) confState() *raftpb.ConfState {
	r.confMu.Lock()
	defer r.confMu.Unlock()
	return r.conf
}

// voterNodes returns the nodes of the replica's group's voters.
func (r *replica) voterNodes() []uint64 {
	return nodesOf(r.confState().GetVoters())
}

// nodesOf returns the nodes of raft ids.
func nodesOf(ids []uint64) []uint64 {
	out := make([]uint64, len(ids))
	for i, id := range ids {
		out[i] = transport.NodeOf(id)
	}
	return out
}

// setConf makes cs the group's configuration from index on.
func (r *replica) setConf(index uint64, cs *raftpb.ConfState) {
	r.confMu.Lock()
	r.conf = cs
	r.confMu.Unlock()
	r.confIndex = index
	r.members.seen = max(r.members.seen, index)
}

// applyRangeConfChange applies a committed configuration change of a
// range group, on the loop (raft wants it there), records the new
// configuration durably with its index, and queues the replica's
// retirement if the change removed it.
func (r *replica) applyRangeConfChange(e *raftpb.Entry) error {
	var cc raftpb.ConfChange
	if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
		return fmt.Errorf("cluster: group %d: configuration change at %d: %w", r.group, e.GetIndex(), err)
	}
	cs := r.rawNode().ApplyConfChange(&cc)
	w := r.n.cfg.Log.NewWrite()
	w.SetConfState(r.group, e.GetIndex(), cs)
	if err := w.Commit(true); err != nil {
		return err
	}
	r.setConf(e.GetIndex(), cs)
	r.n.log.Info("cluster: range group's members changed", "node", r.n.cfg.ID, "group", r.group, "index", e.GetIndex(),
		"change", cc.GetType().String(), "member", cc.GetNodeId(), "voters", cs.GetVoters(), "learners", cs.GetLearners())
	if !hasMember(cs, r.id) {
		r.n.hosts.add(hostChange{group: r.group, retire: r.id})
	}
	return nil
}

// retire ends the node's member id of group: removed from the group, it
// stops, its raft log gives way to a tombstone, and its span is emptied.
// It runs on the loop; the log and the span are changed on the apply
// goroutine, after the member's entries still queued there.
func (n *Node) retire(group, id uint64) error {
	r := n.replicaOf(group)
	if r == nil || r.id != id {
		return nil
	}
	n.unhost(r, errBusy(fmt.Sprintf("this node's replica of range group %d was moved away: ask again", group)))
	// The member's entries queued before this on the apply goroutine
	// are applied first, and none is queued after it.
	err := n.onApply(func() error {
		if err := n.cfg.Log.RemoveReplica(group, id); err != nil {
			return fmt.Errorf("cluster: retire member %x of range group %d: %w", id, group, err)
		}
		if frozen, err := n.st().GroupFrozen(group); err != nil || frozen {
			// Its data stays for the group that merges it, whose member
			// here may take it (range_merge.go).
			return err
		}
		if err := n.emptyGroupSpan(group, true); err != nil {
			return err
		}
		_, named, err := n.st().GroupTable(group)
		if err != nil {
			return err
		}
		if !named && n.catalogKnew(group) {
			return n.forgetRetired(group) // merged away: no member of it comes back
		}
		return nil
	})
	if err != nil {
		return err
	}
	n.log.Info("cluster: range group's member here was removed; retired", "node", n.cfg.ID, "group", group, "member", id)
	return nil
}

// unhost takes r out of the node's replicas and ends the waits on it
// with err.
func (n *Node) unhost(r *replica, err error) {
	n.replicasMu.Lock()
	delete(n.replicas, r.group)
	n.replicaList = slices.DeleteFunc(n.replicaList, func(x *replica) bool { return x == r })
	n.replicasMu.Unlock()
	delete(n.touched, r)
	r.install = nil // an ingest under way ends before the group's drop: see ingestGate
	r.stop(err)
	r.failReads(err)
	r.spans.mu.Lock()
	r.spans.removeStaged(n.dir.fs, ^uint64(0))
	r.spans.mu.Unlock()
	r.spans.latest = nil
	n.snaps.release(r.group)
	n.dir.fs.Remove(n.rangeSnapshotRecord(r.group))
}

// emptyGroupSpan empties, in the store, the span of a range group the
// node holds no member of, and resets the group's applied index: the span
// its member held (its old one retired: own), or the range the catalog
// gives it (a new one to start from nothing). It runs where the store may
// be changed: on the apply goroutine, or before Run.
func (n *Node) emptyGroupSpan(group uint64, own bool) error {
	var sp partition.Span
	if own {
		var ok bool
		var err error
		if sp, ok, err = n.st().GroupSpan(group); err != nil || !ok {
			return err // the table is gone, and its keys with it
		}
	} else {
		tg, ok, err := n.st().GroupTable(group)
		if !ok || err != nil {
			return err
		}
		sp = tg.Span()
	}
	if err := n.st().EmptySpan(group, sp); err != nil {
		return fmt.Errorf("cluster: empty the span of range group %d: %w", group, err)
	}
	return nil
}

// hostMember returns the node's replica of range group group for a
// message to member id, hosting it if needed: as a new member (no
// configuration; its leader catches it up from a span snapshot), or
// from its raft log. It returns nil for a message to a member retired
// here or older than the one hosted, and for a group the catalog does
// not know (its table's creation is not applied here yet, or it was
// dropped). It runs on the loop.
func (n *Node) hostMember(group, id uint64) (*replica, error) {
	if group == systemGroup || transport.NodeOf(id) != n.cfg.ID {
		return nil, nil
	}
	// Until this node has applied the entry that made the group, its
	// table's creation may be half applied (the table known, the
	// founders' bootstrap not queued yet), and a member hosted here first
	// would never be bootstrapped.
	if _, ok, err := n.st().GroupTable(group); err != nil || !ok || !n.catalogKnew(group) || n.splitPending(group) {
		return nil, err
	}
	if err := n.applyHostChanges(); err != nil {
		return nil, err
	}
	r := n.replicaOf(group)
	if r != nil {
		if transport.Incarnation(id) <= transport.Incarnation(r.id) {
			return r, nil // its own, or one for a member older than it
		}
		// A newer member of this node: the group removed the one hosted
		// here, which missed its removal.
		if err := n.retire(group, r.id); err != nil {
			return nil, err
		}
	}
	st, err := n.cfg.Log.Group(group)
	if err != nil {
		return nil, fmt.Errorf("cluster: group %d: %w", group, err)
	}
	rec := st.Replica()
	recorded := rec.ID
	if recorded == 0 && !st.Empty() {
		recorded = n.cfg.ID // a founder, from before replica records
	}
	switch {
	case recorded == id && !rec.Removed:
		// Its state is here, not hosted at the start: the table's
		// creation was not applied then.
	case st.Empty() || transport.Incarnation(id) > transport.Incarnation(recorded):
		// New here, or added again: the store holds nothing of it that
		// counts (the applied index its table's creation set on every
		// node, what an old member left), and starts from nothing.
		if err := n.onApply(func() error { return n.emptyGroupSpan(group, false) }); err != nil {
			return nil, err
		}
	default:
		return nil, nil // a message for a member retired here, or older
	}
	if st.Empty() || recorded != id {
		if err := n.cfg.Log.StartReplica(group, id); err != nil {
			return nil, fmt.Errorf("cluster: host member %x of range group %d: %w", id, group, err)
		}
	}
	if err := n.hostGroup(group, nil); err != nil {
		return nil, err
	}
	r = n.replicas[group]
	if r != nil {
		n.log.Info("cluster: hosting a member of a range group", "node", n.cfg.ID, "group", group, "member", id)
	}
	return r, nil
}

// reconcile moves the group one configuration change toward its
// descriptor's voters, on the loop of its ready leader, when no change
// is in flight. It is called before the group's tick, while raft holds
// no entry the log does not: a new member's raft id is the index its
// addition will have.
func (r *replica) reconcile() {
	n := r.n
	if !r.ready.Load() {
		r.members.mergeSince = 0 // a leader counts its patience from its own first look
	}
	if r.group == systemGroup || r.tableless || !r.ready.Load() || r.rawNode().HasReady() {
		return
	}
	work, _, sp := r.spanDue()
	if work != spanMerge && work != spanFreeze {
		r.members.mergeSince = 0
	}
	settled := r.settled()
	if settled && work == spanSettled {
		return
	}
	st := r.rawNode().Status()
	if st.RaftState != raft.StateLeader || st.LeadTransferee != 0 {
		return
	}
	// The last change must be applied first: raft takes one at a time.
	// Applied in the store, not only handed to the apply goroutine (raft's
	// Applied): spanDue reads the store, and until the store has applied a
	// split, freeze or merge it still finds it to make, and would propose
	// it again. A second merge of the same group, applied after a split
	// at the same key, stopped every replica (its record is gone).
	if p := r.members.proposed; p.term == st.GetTerm() && p.index > r.applied.Load() {
		return
	}
	switch work {
	case spanSplit:
		if r.maybeSplit(st, sp) {
			return
		}
	case spanFreeze:
		r.maybeFreeze(st, sp)
		return
	case spanMerge:
		if r.maybeMerge(st, sp) {
			return
		}
	}
	want, ok := r.wantedVoters()
	if settled || !ok {
		return
	}
	// While a merge waits, the group adds no member (one added now would
	// not hold the group to merge) and removes its learners; it gets
	// them back once merged, from a snapshot of the merged span.
	merging := work == spanMerge
	cs := r.conf
	propose := func(t raftpb.ConfChangeType, id uint64, why string) {
		last, err := r.rlog.LastIndex()
		if err != nil {
			return
		}
		cc := &raftpb.ConfChange{Type: t.Enum(), NodeId: proto.Uint64(id)}
		if err := r.rawNode().ProposeConfChange(cc); err != nil {
			n.log.Warn("cluster: range group's member change refused", "group", r.group, "change", t.String(), "member", id, "err", err)
			return
		}
		r.members.proposed = confMark{last + 1, st.GetTerm()}
		r.quiesced.Store(false)
		n.touch(r)
		n.log.Info("cluster: moving a range group's members", "node", n.cfg.ID, "group", r.group, "change", t.String(),
			"member", id, "why", why, "want", want, "voters", cs.GetVoters(), "learners", cs.GetLearners())
	}
	// Add: a named node without a member gets one, as a learner. Not
	// while the log still begins at entry 1: the group's configuration
	// was bootstrapped, not logged, so a new member must start from a
	// snapshot, which carries it (the log drops entry 1 once applied).
	for _, node := range want {
		if memberOf(cs, node) != 0 || merging {
			continue
		}
		last, err := r.rlog.LastIndex()
		first, ferr := r.rlog.FirstIndex()
		if err != nil || ferr != nil || first <= 1 || last+1 > transport.MaxNodeID {
			return
		}
		propose(raftpb.ConfChangeType_ConfChangeAddLearnerNode, transport.ReplicaID(node, last+1), "named in the descriptor")
		return
	}
	// Promote a named node's learner once it has caught up.
	allVoters := true
	for _, id := range cs.GetLearners() {
		if !slices.Contains(want, transport.NodeOf(id)) || merging {
			propose(raftpb.ConfChangeType_ConfChangeRemoveNode, id, "a learner of a node no longer named, or of a group merging")
			return
		}
		allVoters = false
		if pr, ok := st.Progress[id]; ok && pr.Match > 0 && pr.Match+catchUpSlack >= st.GetCommit() {
			propose(raftpb.ConfChangeType_ConfChangeAddNode, id, "caught up")
			return
		}
	}
	if !allVoters {
		return // the removals wait for the new members: the group keeps its size
	}
	for _, id := range cs.GetVoters() {
		if slices.Contains(want, transport.NodeOf(id)) {
			continue
		}
		if id != r.id {
			propose(raftpb.ConfChangeType_ConfChangeRemoveNode, id, "its node is no longer named")
			return
		}
		// This node leaves: hand the lease to the named voter furthest
		// along, then the new leader removes this member.
		if n.live.ticks-r.members.transferAt < uint64(n.cfg.ElectionTicks) && r.members.transferAt != 0 {
			return
		}
		var to, best uint64
		for _, v := range cs.GetVoters() {
			if pr, ok := st.Progress[v]; ok && v != r.id && slices.Contains(want, transport.NodeOf(v)) && pr.Match >= best {
				to, best = v, pr.Match
			}
		}
		if to != 0 {
			r.members.transferAt = n.live.ticks
			r.handOver(to)
			n.log.Info("cluster: handing a range group's lease over before leaving it", "node", n.cfg.ID, "group", r.group, "to", to)
		}
		return
	}
}

// wantedVoters returns the nodes the group's descriptor names, when the
// catalog here knows the group.
func (r *replica) wantedVoters() ([]uint64, bool) {
	tg, ok, err := r.n.st().GroupTable(r.group)
	return tg.Group.Voters, ok && err == nil
}

// settled says whether a range group's members are the ones its
// descriptor names, all voters: its leader has nothing to move.
func (r *replica) settled() bool {
	if r.group == systemGroup || r.tableless {
		return true
	}
	want, ok := r.wantedVoters()
	if !ok {
		return true
	}
	cs := r.confState()
	if len(cs.GetLearners()) > 0 || len(cs.GetVoters()) != len(want) {
		return false
	}
	for _, id := range cs.GetVoters() {
		if !slices.Contains(want, transport.NodeOf(id)) {
			return false
		}
	}
	return true
}

// knowsRemoved says whether the replica can tell that member id of its
// group was removed: the log it has seen reaches the change that added
// id (its incarnation; a founder's is 0), and its configuration has no
// such member. A member's raft id is never given again, so the answer
// holds for good.
func (r *replica) knowsRemoved(id uint64) bool {
	return len(r.conf.GetVoters()) > 0 && r.members.seen >= transport.Incarnation(id) && !hasMember(r.conf, id)
}

// Group-0 messages about members (docs/transport.md): a node whose member
// of a group has heard from no leader for a while asks the nodes its group's
// descriptor names whether it is still a member (msgMemberCheck, its
// Context the (uvarint group, uvarint member) pairs asked about); a node
// that knows some of them removed says so (msgMembersRemoved, the same
// pairs), and so does any node that gets a raft message from a member it
// knows removed.
const (
	msgMemberCheck    = raftpb.MessageType_MsgReadIndex
	msgMembersRemoved = raftpb.MessageType_MsgReadIndexResp
)

// checkEveryTicks is how long a member goes without word from a leader
// before it asks whether it was removed, and how often it asks again.
func (n *Node) checkEveryTicks() int { return 2 * n.cfg.ElectionTicks }

// fromLeader says whether a message is one only a group's leader sends.
func fromLeader(m *raftpb.Message) bool {
	switch m.GetType() {
	case raftpb.MessageType_MsgApp, raftpb.MessageType_MsgHeartbeat, raftpb.MessageType_MsgSnap:
		return true
	}
	return false
}

// noteSilence counts a tick of a range replica that heard from no leader
// of its group since the last and, every checkEveryTicks of them,
// queues the question of its membership for the nodes its descriptor
// names and those of its voters.
func (r *replica) noteSilence() {
	if r.group == systemGroup || r.tableless || r.isLeader || r.members.heard {
		r.members.silent, r.members.heard = 0, false
		return
	}
	r.members.silent++
	if r.members.silent%r.n.checkEveryTicks() != 0 {
		return
	}
	want, _ := r.wantedVoters()
	for _, node := range slices.Concat(want, r.voterNodes()) {
		if node != r.n.cfg.ID {
			r.n.live.checks.add(node, r.group, r.id)
		}
	}
}

// memberPairs decodes a Context of (group, member) pairs; false if it is
// malformed.
func memberPairs(ctx []byte, fn func(group, id uint64)) bool {
	for len(ctx) > 0 {
		g, k := binary.Uvarint(ctx)
		if k <= 0 {
			return false
		}
		id, k2 := binary.Uvarint(ctx[k:])
		if k2 <= 0 {
			return false
		}
		ctx = ctx[k+k2:]
		fn(g, id)
	}
	return true
}

// sendMemberMessages sends the membership questions and answers queued
// in this tick, one group-0 message per peer and kind.
func (n *Node) sendMemberMessages() {
	var out []*raftpb.Message
	for kind, notes := range map[raftpb.MessageType]memberNotes{msgMemberCheck: n.live.checks, msgMembersRemoved: n.live.removed,
		msgMergeCheck: n.live.mergeChecks, msgFrozenHere: n.live.frozenHere, msgMerged: n.live.merged} {
		for node, keys := range notes {
			var pairs []byte
			for k := range keys {
				pairs = binary.AppendUvarint(binary.AppendUvarint(pairs, k.group), k.id)
			}
			out = append(out, &raftpb.Message{Type: kind.Enum(), From: proto.Uint64(n.cfg.ID), To: proto.Uint64(node), Context: pairs})
		}
		clear(notes)
	}
	if len(out) > 0 {
		n.sendGroup(0, out)
	}
}

// heardMemberCheck answers a peer's question about its members: those of
// them this node knows removed.
func (n *Node) heardMemberCheck(m *raftpb.Message) {
	ok := memberPairs(m.GetContext(), func(group, id uint64) {
		if r := n.replicaOf(group); r != nil && transport.NodeOf(id) == m.GetFrom() && r.knowsRemoved(id) {
			n.live.removed.add(m.GetFrom(), group, id)
		}
	})
	if !ok {
		n.log.Warn("cluster: a malformed membership question is ignored", "node", n.cfg.ID, "from", m.GetFrom())
	}
}

// heardMembersRemoved retires the members of this node a peer says were
// removed from their groups.
func (n *Node) heardMembersRemoved(m *raftpb.Message) {
	ok := memberPairs(m.GetContext(), func(group, id uint64) {
		if r := n.replicaOf(group); r != nil && r.id == id {
			n.hosts.add(hostChange{group: group, retire: id})
		}
	})
	if !ok {
		n.log.Warn("cluster: a malformed membership answer is ignored", "node", n.cfg.ID, "from", m.GetFrom())
	}
}

// strayFrom notes a raft message of a range group from a member this
// replica knows was removed: its node is told, with the tick's answers.
func (r *replica) strayFrom(id uint64) {
	if r.group != systemGroup && r.knowsRemoved(id) {
		r.n.live.removed.add(transport.NodeOf(id), r.group, id)
	}
}
