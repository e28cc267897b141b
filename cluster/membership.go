package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/vfs"
)

// Membership changes are raft configuration changes, one at a time: a
// new node joins as a learner (it takes the log or a snapshot but does
// not vote), the leader promotes it to a voter once it has caught up, and
// a node leaves by being removed. The change's entry carries the node's
// internal address, so every member learns where the new one is; each
// node keeps the address book in its data directory (MEMBERS), and a
// snapshot carries it to a node that missed the entries.
//
// Node ids are never reused: the book also holds the highest id the
// group ever assigned and the ids it removed, both raised by every
// replica as it applies the changes (and carried by snapshots), and the
// leader gives a new node the highest plus one. A node that comes back
// after its removal is therefore never taken for a newer one, and a node
// that finds its own id among the removed stops (ErrRemoved).
//
// raft takes one change at a time: a change proposed while an earlier
// one is not yet applied is turned into an empty entry. The leader
// refuses such a request itself (503 ServerBusy, to be asked again) and,
// should raft refuse one all the same, finds its index applied without
// the change and says so rather than wait out the caller's time.

// ErrRemoved is what Run returns on a node that the cluster removed.
var ErrRemoved = errors.New("cluster: this node was removed from the cluster")

// members is a node's member book, and the loop's record of the
// configuration changes it proposed and applied.
type members struct {
	mu   sync.Mutex
	book memberBook
	// applied lists the newest configuration changes applied here (index
	// and term), oldest first, so that a waiter can tell whether the
	// entry at its change's index was its change.
	applied []confMark
	// snapIndex is the index of the last snapshot installed here: the
	// changes at or below it were not seen one by one.
	snapIndex uint64

	// proposed is the last change this node proposed as the leader; owned
	// by the loop.
	proposed confMark
	// noPrecheck, set by tests, proposes without checking for a pending
	// change, so that raft's refusal is what the waiter detects.
	noPrecheck atomic.Bool
}

// confMark identifies a log entry.
type confMark struct{ index, term uint64 }

// appliedKept is how many applied changes members.applied remembers.
const appliedKept = 64

func (m *members) get(id uint64) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.book.addrs[id]
}

// Members returns the node's address book: every member's internal
// address by id.
func (n *Node) Members() map[uint64]string { return n.members.all() }

func (m *members) all() map[uint64]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.book.addrs)
}

// isRemoved reports whether the group removed node id.
func (m *members) isRemoved(id uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.book.removed[id]
}

// clone returns a copy of the member book.
func (m *members) clone() memberBook {
	m.mu.Lock()
	defer m.mu.Unlock()
	return memberBook{addrs: maps.Clone(m.book.addrs), highest: m.book.highest, removed: maps.Clone(m.book.removed),
		draining: maps.Clone(m.book.draining)}
}

// isDraining reports whether member id is being drained of its range
// groups before it leaves.
func (m *members) isDraining(id uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.book.draining[id]
}

// highest returns the highest node id the group ever assigned, as this
// node knows it.
func (m *members) highest() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.book.highest
}

// initMembers sets up a new node's member book from the one in its data
// directory, the configuration's bootstrap list and the group's
// configuration, and writes it back. A node the group removed is marked:
// Run returns ErrRemoved at once.
func (n *Node) initMembers(book memberBook, cs *raftpb.ConfState) error {
	c := &n.cfg
	for id, addr := range c.Members {
		if _, ok := book.addrs[id]; !ok && !book.removed[id] {
			book.addrs[id] = addr
		}
	}
	ids := slices.Concat([]uint64{c.ID}, cs.GetVoters(), cs.GetLearners(), cs.GetVotersOutgoing(), cs.GetLearnersNext(),
		slices.Collect(maps.Keys(book.addrs)))
	if !c.Join {
		ids = append(ids, c.Peers...)
	}
	for _, id := range ids {
		book.highest = max(book.highest, id)
	}
	n.members.book = book
	if book.removed[c.ID] {
		n.removed.Store(true)
	}
	return n.dir.writeFile(membersFile, encodeMembers(book))
}

// updateMembers changes the member book with change, in memory and on
// disk, and tells the owner's hook of every address that changed.
func (n *Node) updateMembers(change func(b *memberBook)) error {
	n.members.mu.Lock()
	before := maps.Clone(n.members.book.addrs)
	change(&n.members.book)
	for id := range n.members.book.removed {
		delete(n.members.book.addrs, id)
		delete(n.members.book.draining, id)
	}
	after := maps.Clone(n.members.book.addrs)
	raw := encodeMembers(n.members.book)
	n.members.mu.Unlock()
	if n.cfg.OnMember != nil {
		for _, id := range slices.Sorted(maps.Keys(before)) {
			if _, ok := after[id]; !ok {
				n.cfg.OnMember(id, "")
			}
		}
		for _, id := range slices.Sorted(maps.Keys(after)) {
			if before[id] != after[id] {
				n.cfg.OnMember(id, after[id])
			}
		}
	}
	return n.dir.writeFile(membersFile, raw)
}

// mergeMembers takes in a member book a snapshot carried (the leader's
// when it served the snapshot): its addresses, its highest id and the ids
// it removed.
func (n *Node) mergeMembers(b memberBook, snapIndex uint64) error {
	err := n.updateMembers(func(mine *memberBook) {
		maps.Copy(mine.addrs, b.addrs)
		maps.Copy(mine.removed, b.removed)
		maps.Copy(mine.draining, b.draining)
		mine.highest = max(mine.highest, b.highest)
	})
	n.members.mu.Lock()
	n.members.snapIndex = max(n.members.snapIndex, snapIndex)
	removed := n.members.book.removed[n.cfg.ID]
	n.members.mu.Unlock()
	if removed {
		n.removed.Store(true)
	}
	return err
}

// applyConfChange applies a committed configuration change on the loop
// goroutine (raft wants it there) and records the new configuration.
func (n *Node) applyConfChange(e *raftpb.Entry) error {
	var cc raftpb.ConfChange
	if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
		return fmt.Errorf("cluster: configuration change at %d: %w", e.GetIndex(), err)
	}
	cs := n.rn.ApplyConfChange(&cc)
	n.confMu.Lock()
	n.conf = cs
	n.confMu.Unlock()
	w := n.cfg.Log.NewWrite()
	w.SetConfState(systemGroup, e.GetIndex(), cs)
	if err := w.Commit(true); err != nil {
		return err
	}
	id := cc.GetNodeId()
	var err error
	switch cc.GetType() {
	case raftpb.ConfChangeType_ConfChangeAddLearnerNode, raftpb.ConfChangeType_ConfChangeAddNode:
		// Every replica raises the highest id as it applies the change
		// that assigned it: whoever leads next assigns past it.
		err = n.updateMembers(func(b *memberBook) {
			b.highest = max(b.highest, id)
			// The leader checked the address (AddMember); the check here
			// keeps an unreadable one out of MEMBERS all the same.
			if addr := string(cc.GetContext()); checkAddress(addr) == nil && !b.removed[id] {
				b.addrs[id] = addr
			}
		})
	case raftpb.ConfChangeType_ConfChangeUpdateNode:
		// Raft changes nothing; the context says what the change is.
		if string(cc.GetContext()) == drainContext {
			err = n.updateMembers(func(b *memberBook) {
				if !b.removed[id] {
					b.draining[id] = true
				}
			})
		}
	case raftpb.ConfChangeType_ConfChangeRemoveNode:
		// Recorded before the node stops: restarted, it finds itself
		// removed.
		err = n.updateMembers(func(b *memberBook) {
			b.highest = max(b.highest, id)
			b.removed[id] = true
		})
		if id == n.cfg.ID {
			n.removed.Store(true)
		}
	}
	n.members.mu.Lock()
	n.members.applied = append(n.members.applied, confMark{e.GetIndex(), e.GetTerm()})
	if k := len(n.members.applied) - appliedKept; k > 0 {
		n.members.applied = slices.Delete(n.members.applied, 0, k)
	}
	n.members.mu.Unlock()
	if err != nil {
		return err
	}
	n.log.Info("cluster: configuration changed", "node", n.cfg.ID, "change", cc.GetType().String(), "member", id,
		"voters", cs.GetVoters(), "learners", cs.GetLearners())
	return nil
}

// confOutcome tells what became of the change proposed at mark, once
// this node has applied that index: taken (it was applied), refused (the
// entry there is not it: raft turned it into an empty entry, or a new
// leader replaced it; nothing changed), or still unknown.
func (n *Node) confOutcome(mark confMark) (taken, refused bool) {
	if mark.index == 0 || n.applied.Load() < mark.index {
		return false, false
	}
	n.members.mu.Lock()
	defer n.members.mu.Unlock()
	for _, a := range n.members.applied {
		if a.index == mark.index {
			return a.term == mark.term, a.term != mark.term
		}
	}
	// Not among the changes applied: refused, if this node applied the
	// entries there one by one (not from a snapshot) and remembers back
	// that far.
	seen := len(n.members.applied) < appliedKept || n.members.applied[0].index < mark.index
	return false, seen && n.members.snapIndex < mark.index
}

// errConfRefused answers a change raft refused, or one proposed while
// another was pending.
func errConfRefused() error {
	return errBusy("another membership change is not yet applied: ask again")
}

// memberRequest asks the loop for a membership change.
type memberRequest struct {
	add   string // the address of a node to add as a learner
	drop  uint64 // the id of a node to remove
	drain uint64 // the id of a node to drain of its range groups
	done  chan memberAnswer
}

// drainContext is the context of the configuration change (an update,
// which raft applies as nothing) that marks a member draining.
const drainContext = "drain"

// DrainMember marks node id draining: the placement controller moves its
// range groups' members to other nodes (placement.go), and names it in
// none from then on, so that it can leave without a group losing a
// copy. Only the ready leader takes it; a member draining already is
// answered at once.
func (n *Node) DrainMember(ctx context.Context, id uint64) error {
	if n.members.isDraining(id) {
		return nil
	}
	a, err := n.memberChange(ctx, memberRequest{drain: id})
	if err != nil {
		return err
	}
	return n.awaitChange(ctx, a.mark, func() bool { return n.members.isDraining(id) })
}

// awaitChange waits until done says the change proposed at mark is in
// effect here: nil then; errConfRefused if raft refused it; errAmbiguous
// if ctx ends first.
func (n *Node) awaitChange(ctx context.Context, mark confMark, done func() bool) error {
	for !done() {
		if _, refused := n.confOutcome(mark); refused {
			return errConfRefused()
		}
		select {
		case <-ctx.Done():
			return errAmbiguous
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

type memberAnswer struct {
	id   uint64
	mark confMark // the change's entry; zero when nothing was proposed
	err  error
}

// AddMember adds the node at addr (its internal address) to the group as
// a learner and returns its new id; the leader promotes it to a voter
// once it has caught up. Only the ready leader takes it.
func (n *Node) AddMember(ctx context.Context, addr string) (uint64, error) {
	if err := checkAddress(addr); err != nil {
		return 0, err
	}
	a, err := n.memberChange(ctx, memberRequest{add: addr})
	if err != nil {
		return 0, err
	}
	// Answer once the change is applied here: the new node's peers know it.
	err = n.awaitChange(ctx, a.mark, func() bool { return n.members.get(a.id) == addr })
	if err != nil && err != errAmbiguous {
		return 0, err // refused: no id was given
	}
	return a.id, err
}

// RemoveMember removes node id from the group. The leader does not remove
// itself: it hands its leadership to another voter first and answers 503
// ServerBusy, and the caller asks again (the new leader then does it).
// Removing a node already removed succeeds.
func (n *Node) RemoveMember(ctx context.Context, id uint64) error {
	a, err := n.memberChange(ctx, memberRequest{drop: id})
	if err != nil {
		return err
	}
	return n.awaitChange(ctx, a.mark, func() bool { return !hasMember(n.confState(), id) })
}

func (n *Node) memberChange(ctx context.Context, r memberRequest) (memberAnswer, error) {
	if !n.ready.Load() {
		return memberAnswer{}, errNotLeader(n.leader.Load())
	}
	r.done = make(chan memberAnswer, 1)
	select {
	case n.memberReqs <- r:
	case <-ctx.Done():
		return memberAnswer{}, ctx.Err()
	case <-n.stopped:
		return memberAnswer{}, ErrStopped
	}
	select {
	case a := <-r.done:
		return a, a.err
	case <-ctx.Done():
		return memberAnswer{}, errAmbiguous
	}
}

// confPending reports, on the loop of the leader, whether a configuration
// change is proposed and not yet applied, which raft would refuse: one
// this node proposed in its term, or (before the leader is ready) one of
// an earlier term still in its log.
func (n *Node) confPending(st raft.Status) bool {
	if !n.ready.Load() {
		return true
	}
	p := n.members.proposed
	return p.term == st.GetTerm() && p.index > st.Applied
}

// proposeConfChange proposes cc on the loop of the leader and returns its
// entry. The loop has handled every Ready before taking a request or a
// tick, so the log holds every entry raft has: the change goes next.
func (n *Node) proposeConfChange(cc *raftpb.ConfChange, term uint64) (confMark, error) {
	last, err := n.rlog.LastIndex()
	if err != nil {
		return confMark{}, err
	}
	if err := n.rn.ProposeConfChange(cc); err != nil {
		return confMark{}, err
	}
	n.members.proposed = confMark{last + 1, term}
	return n.members.proposed, nil
}

// handleMemberRequest proposes a membership change, on the loop.
func (n *Node) handleMemberRequest(r memberRequest) {
	st := n.rn.Status()
	if st.RaftState != raft.StateLeader {
		r.done <- memberAnswer{err: errNotLeader(st.Lead)}
		return
	}
	if !n.ready.Load() {
		r.done <- memberAnswer{err: errBusy("this node was just elected and has not applied its predecessors' entries yet: ask again")}
		return
	}
	var cc *raftpb.ConfChange
	var id uint64
	switch {
	case r.add != "":
		for mid, addr := range n.members.all() {
			if addr == r.add {
				if _, ok := st.Progress[mid]; ok {
					r.done <- memberAnswer{id: mid} // already a member: joining again after a restart
					return
				}
			}
		}
		// Past every id the group ever assigned: a removed node's id is
		// never given to another.
		id = n.members.highest()
		for pid := range st.Progress {
			id = max(id, pid)
		}
		for mid := range n.members.all() {
			id = max(id, mid)
		}
		id++
		cc = &raftpb.ConfChange{Type: raftpb.ConfChangeType_ConfChangeAddLearnerNode.Enum(), NodeId: &id, Context: []byte(r.add)}
	case r.drain != 0:
		id = r.drain
		if _, ok := st.Progress[id]; !ok {
			r.done <- memberAnswer{err: errBusy(fmt.Sprintf("node %d is not a member", id))}
			return
		}
		cc = &raftpb.ConfChange{Type: raftpb.ConfChangeType_ConfChangeUpdateNode.Enum(), NodeId: &id, Context: []byte(drainContext)}
	default:
		id = r.drop
		if _, ok := st.Progress[id]; !ok {
			if n.members.isRemoved(id) {
				r.done <- memberAnswer{id: id} // removed already: asked again after an unknown outcome
				return
			}
			r.done <- memberAnswer{err: errBusy(fmt.Sprintf("node %d is not a member", id))}
			return
		}
		if id == n.cfg.ID {
			// Hand over first: a leader that removed itself would stop
			// before its successor is known.
			for pid, pr := range st.Progress {
				if pid != id && !pr.IsLearner {
					n.replica.voidLease()
					n.rn.TransferLeader(pid)
					break
				}
			}
			r.done <- memberAnswer{err: errBusy("this node leads: leadership is being handed over; ask again")}
			return
		}
		cc = &raftpb.ConfChange{Type: raftpb.ConfChangeType_ConfChangeRemoveNode.Enum(), NodeId: &id}
	}
	if !n.members.noPrecheck.Load() && n.confPending(st) {
		r.done <- memberAnswer{err: errConfRefused()}
		return
	}
	mark, err := n.proposeConfChange(cc, st.GetTerm())
	if err != nil {
		r.done <- memberAnswer{err: errBusy(err.Error())}
		return
	}
	r.done <- memberAnswer{id: id, mark: mark}
}

// promoteLearners proposes, on the leader, that a learner that has caught
// up become a voter. One change at a time: raft takes a new one only once
// the last is applied.
func (n *Node) promoteLearners() {
	st := n.rn.Status()
	if st.RaftState != raft.StateLeader || time.Since(n.lastPromotion) < time.Second || n.confPending(st) {
		return
	}
	for id, pr := range st.Progress {
		if pr.IsLearner && pr.Match > 0 && pr.Match+catchUpSlack >= st.GetCommit() {
			cc := &raftpb.ConfChange{Type: raftpb.ConfChangeType_ConfChangeAddNode.Enum(), NodeId: &id, Context: []byte(n.members.get(id))}
			if _, err := n.proposeConfChange(cc, st.GetTerm()); err == nil {
				n.lastPromotion = time.Now()
				n.log.Info("cluster: promoting a learner that caught up", "node", id, "match", pr.Match, "commit", st.GetCommit())
			}
			return
		}
	}
}

// catchUpSlack is how far behind the commit index a learner may be and
// still count as caught up: promoted, it will not hold back a quorum.
const catchUpSlack = 16

// writeFile replaces a small file of the data directory atomically and
// durably.
func (d *storeDir) writeFile(name string, b []byte) error {
	if err := vfs.WriteFileAtomic(d.fs, filepath.Join(d.dir, name), b); err != nil {
		return fmt.Errorf("cluster: write %s: %w", name, err)
	}
	return nil
}
