package cluster

import (
	"slices"

	"go.etcd.io/raft/v3/raftpb"
)

// A leader tells its followers of a new commit index by an append with no
// entries, which raft sends to every follower as soon as an answer
// commits something (its bcastAppend). Under a steady stream of writes
// that is a round of its own for every round of entries: the notice out,
// the follower's turn (a raft log write, an apply), its answer back, the
// leader's turn, and the wake-ups of each; while the next append, a
// moment later, carries the same commit index anyway.
//
// So a range group's leader holds such a notice back: an append with
// entries to the same member makes it moot (it carries a commit index at
// least as high, in the same term or a later one), and whatever is still
// held goes out at the node's next tick, with the heartbeats (which carry
// the commit index too). A follower then applies up to a tick later; no
// answer waits for that: the leader answers from its own apply, and a new
// leader applies what its log holds before it serves. A leader that
// quiesces drops its held notices (its last heartbeat carries the commit
// index; a notice after it would wake the follower), and one that loses
// the leadership drops them too (they are of its term). The system
// group's notices go out at once: the catalog a follower serves routing
// from should not lag a tick behind.

// commitNotices are the appends without entries a range group's leader
// holds back, one per follower at most (loop-owned). A slice, not a map:
// a group has a handful of followers, and an idle one keeps nothing.
type commitNotices struct {
	held []*raftpb.Message
	// listed says the replica is in its node's heldNotices.
	listed bool
}

// drop forgets the notice held for member to, if any.
func (c *commitNotices) drop(to uint64) {
	c.held = slices.DeleteFunc(c.held, func(m *raftpb.Message) bool { return m.GetTo() == to })
}

// holdCommitNotices takes out of msgs, a Ready's messages of a range
// group, the appends without entries, which it holds; an append with
// entries drops what is held for its member. It returns the rest.
func (r *replica) holdCommitNotices(msgs []*raftpb.Message) []*raftpb.Message {
	if r.group == systemGroup {
		return msgs
	}
	out := msgs[:0]
	for _, m := range msgs {
		if m.GetType() == raftpb.MessageType_MsgApp {
			if len(m.Entries) == 0 {
				r.holdNotice(m)
				continue
			}
			r.notices.drop(m.GetTo())
		}
		out = append(out, m)
	}
	return out
}

func (r *replica) holdNotice(m *raftpb.Message) {
	c := &r.notices
	c.drop(m.GetTo())
	c.held = append(c.held, m)
	if !c.listed {
		c.listed = true
		r.n.heldNotices = append(r.n.heldNotices, r)
	}
}

// dropCommitNotices forgets what the replica holds: its leader quiesced
// or lost the leadership.
func (r *replica) dropCommitNotices() { r.notices.held = nil }

// sendCommitNotices sends the notices the node's range group leaders
// still hold, on the loop, at a tick.
func (n *Node) sendCommitNotices() {
	for _, r := range n.heldNotices {
		held := r.notices.held
		r.notices = commitNotices{}
		if len(held) > 0 && n.replicas[r.group] == r {
			n.sendGroup(r.group, held)
		}
	}
	clear(n.heldNotices)
	n.heldNotices = n.heldNotices[:0]
}
