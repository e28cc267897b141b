package cluster

import (
	"encoding/binary"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/partition"
)

// A replica's check that it has applied what its group had committed at
// some moment. A split's child waits to be hosted (splitPending), and an
// orphan of a merge to be dropped (dropOrphan), while a replica here of
// the merging group may still have the merge to apply; they wait until
// it is past an entry known to be committed by then (the split that
// started the child, the merge the orphan's word reports), at an index
// no one here knows. The group's leader knows a bound: asked after that
// moment, its commit index, confirmed by a quorum (raft's ReadIndex, from
// a follower), is at or past every entry committed before the question.
// A replica that has applied that far has applied the entry, from its
// log or within a snapshot.

// catchUpTag starts a catch-up question's ReadIndex context (a read
// round's is eight bytes, its sequence number): the tag, then the
// question's number as eight bytes.
const catchUpTag = 'c'

// catchUp is a replica's last catch-up question: its number (from the
// node's count of them), the tick it was asked at, and the leader's
// answer once it is in.
type catchUp struct {
	seq, askedTick uint64
	answered       bool
	index          uint64
}

// catchUpSince says whether the replica has applied everything its group
// had committed when the leader answered a question asked after the
// node's question number since. Until it knows, it asks the leader, again
// when an answer is overdue (a message lost, a leader changed). It runs
// on the loop.
func (r *replica) catchUpSince(since uint64) bool {
	if c := r.catchUp; c != nil && c.seq > since {
		if c.answered {
			return r.applied.Load() >= c.index
		}
		if r.n.live.ticks-c.askedTick < uint64(r.n.checkEveryTicks()) {
			return false
		}
	}
	r.askCatchUp()
	return false
}

// askCatchUp asks the group's leader for its commit index: this replica's
// raft, when this node leads (a dormant leader is woken, and stands
// again), else a ReadIndex request sent to the leader this node knows
// (raft would drop one while it knows no leader, which a replica woken
// from dormancy does not). With no leader known, nothing is asked, and
// the next look asks again.
func (r *replica) askCatchUp() {
	n := r.n
	n.catchUpSeq++
	ctx := binary.BigEndian.AppendUint64([]byte{catchUpTag}, n.catchUpSeq)
	r.catchUp = &catchUp{seq: n.catchUpSeq, askedTick: n.live.ticks}
	if r.leader.Load() == n.cfg.ID {
		r.rawNode().ReadIndex(ctx)
		n.touch(r)
		return
	}
	lead := memberOf(r.conf, r.leader.Load())
	if lead == 0 {
		return
	}
	n.sendGroup(r.group, []*raftpb.Message{{Type: raftpb.MessageType_MsgReadIndex.Enum(), From: proto.Uint64(r.id), To: proto.Uint64(lead),
		Entries: []*raftpb.Entry{{Data: ctx}}}})
}

// heardCatchUp takes the answer to the replica's catch-up question, if
// the read state is one; it says whether it was.
func (r *replica) heardCatchUp(ctx []byte, index uint64) bool {
	if len(ctx) != 1+8 || ctx[0] != catchUpTag {
		return false
	}
	if c := r.catchUp; c != nil && c.seq == binary.BigEndian.Uint64(ctx[1:]) {
		c.answered, c.index = true, index
	}
	return true
}

// mergeBehind returns a group hosted here whose span ends where sp
// starts, other than skip, that has not caught up with its leader since
// the node's catch-up question number since (0 if none): it may still
// have the merge of sp's group to apply, which needs that group's frozen
// span here. It runs on the loop.
func (n *Node) mergeBehind(sp partition.Span, skip, since uint64) uint64 {
	n.loadWhere(func(g uint64, _ unloadedReplica) bool {
		own, ok := n.groupSpan(g)
		return g != skip && ok && endsWhereStarts(own, sp)
	})
	for _, r := range n.replicaList {
		own, ok := n.groupSpan(r.group)
		if r.group != skip && r.group != systemGroup && ok && endsWhereStarts(own, sp) && !r.catchUpSince(since) {
			return r.group
		}
	}
	return 0
}

// waitsOnMerge says whether group's hosting or drop, waiting in w, waits
// still: whether a group hosted here that ends where sp starts has not
// caught up with its leader since the wait began (mergeBehind). It logs
// the group waited on, naming the waiter as what, when the wait begins.
func (n *Node) waitsOnMerge(w catchUpWaits, group uint64, sp partition.Span, what string) bool {
	since, began := w.since(group, n.catchUpSeq)
	behind := n.mergeBehind(sp, group, since)
	if behind != 0 && began {
		n.log.Debug("cluster: "+what+" waits until a group here has caught up with its leader",
			"node", n.cfg.ID, "group", group, "behind", behind)
	}
	return behind != 0
}

// catchUpWaits holds, for each group whose hosting or drop waits on
// another group's catch-up, the number of the node's last catch-up
// question before the wait began: the entry that group waits for was
// committed before then. Loop-owned.
type catchUpWaits map[uint64]uint64

// since returns group's number, recording seq as it if its wait begins
// now, and whether it did.
func (w catchUpWaits) since(group, seq uint64) (since uint64, began bool) {
	if s, ok := w[group]; ok {
		return s, false
	}
	w[group] = seq
	return seq, true
}

// forgetWaits drops the waits that are over: of a split's child hosted
// here or no longer in the catalog, of an orphan whose record is gone. It
// runs on the loop.
func (n *Node) forgetWaits() {
	for g := range n.splitWaits {
		if _, named, err := n.st().GroupTable(g); (err == nil && !named) || n.hostsGroup(g) {
			delete(n.splitWaits, g)
		}
	}
	for g := range n.orphanWaits {
		if recorded, err := n.st().SpanRecorded(g); err == nil && !recorded {
			delete(n.orphanWaits, g)
		}
	}
	for g := range n.catalogWaits {
		if r := n.replicaOf(g); r == nil || !r.holdsLease() {
			delete(n.catalogWaits, g)
		}
	}
}
