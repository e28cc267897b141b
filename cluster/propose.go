package cluster

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/tabuladb/tabula/cluster/command"
	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
)

// result is what applying a command gave, for the node that proposed it.
type result struct {
	entity   partition.StoredEntity
	entities []partition.StoredEntity
	table    partition.Table
	err      error
}

// proposal is a command on its way into a group's log.
type proposal struct {
	r      *replica
	data   []byte // the encoded command, its timestamp still to stamp
	stamps int    // how many commit timestamps it takes (0: none)
	w      *waiter
}

// waiter is a proposer waiting for its command's result.
type waiter struct {
	id uint64
	ch chan result // buffered: the apply goroutine never blocks on it
	// index is the log index the command's entry took, once this node,
	// as the leader, appended it; 0 before.
	index uint64
	// proposed is set once raft took the command: from then on its entry
	// may reach other nodes, even if this node's own log drops it before
	// writing it (a higher term stepped before the next Ready truncates
	// it, while the Ready still sends the append to the followers).
	proposed bool
}

// waiters are the proposals of this node in flight, by proposal id.
type waiters struct {
	mu   sync.Mutex
	m    map[uint64]*waiter
	next uint64
	// orphans are the waiters whose entry this node appended as the
	// leader before it lost the leadership: the entry may yet be
	// committed by the next leader, or replaced (orphan, settle).
	orphans    []*waiter
	hasOrphans atomic.Bool
}

// add registers a new waiter with an id unique to this node.
func (ws *waiters) add(node uint64) *waiter {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.next++
	w := &waiter{id: node<<48 | ws.next&(1<<48-1), ch: make(chan result, 1)}
	if ws.m == nil {
		// Made at the first write: most replicas of a node never lead.
		ws.m = make(map[uint64]*waiter)
	}
	ws.m[w.id] = w
	return w
}

// done hands a command's result to its waiter, if it is still waiting,
// and says whether it was.
func (ws *waiters) done(id uint64, r result) bool {
	ws.mu.Lock()
	w := ws.m[id]
	delete(ws.m, id)
	ws.mu.Unlock()
	if w != nil {
		w.ch <- r
	}
	return w != nil
}

// waiting says whether w still waits for its result.
func (ws *waiters) waiting(w *waiter) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.m[w.id] == w
}

// empty says whether no proposal of this node is in flight.
func (ws *waiters) empty() bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.m) == 0
}

func (ws *waiters) forget(w *waiter) {
	ws.mu.Lock()
	delete(ws.m, w.id)
	ws.mu.Unlock()
}

// failAll ends every wait: with err the proposals raft never took, which
// nothing can apply any more, and with errAmbiguous those it took. The
// replica stops tracking them (it stops, or leaves the group), but an
// entry raft took may still be committed by the group's next leader and
// applied everywhere else: answering such a write with err (a ServerBusy
// "ask again", when a member is moved away) told the client nothing was
// written, and the chaos run caught a delete so refused that took effect.
func (ws *waiters) failAll(err error) {
	ws.mu.Lock()
	m := ws.m
	ws.m = nil
	ws.orphans = nil
	ws.hasOrphans.Store(false)
	ws.mu.Unlock()
	for _, w := range m {
		if w.proposed {
			w.ch <- result{err: errAmbiguous}
		} else {
			w.ch <- result{err: err}
		}
	}
}

// appended notes the log index of each of this node's proposals among
// entries its log appends.
func (ws *waiters) appended(ents []*raftpb.Entry) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if len(ws.m) == 0 {
		return
	}
	for _, e := range ents {
		if e.GetType() != raftpb.EntryType_EntryNormal {
			continue
		}
		if id, ok := command.ProposalID(e.GetData()); ok {
			if w := ws.m[id]; w != nil {
				w.index = e.GetIndex()
			}
		}
	}
}

// errNeverLogged and errReplaced answer a proposal whose leader lost the
// leadership, when it is certain the command was not applied: the front
// end repeats it at the new leader (errMoved), and a client may retry it
// as it is.
var (
	errNeverLogged = errMoved("the leader changed before the write entered its log; nothing was written")
	errReplaced    = errMoved("the leader changed and the new leader's log replaced the write; nothing was written")
)

// orphan, at a loss of the leadership, ends the waits of the proposals
// raft never took (nothing of them left the node), and keeps those it
// did: a command the next leader commits is applied here too and answered
// as if nothing had happened; one whose index this node's log recorded
// and the next leader's log replaced is answered errReplaced once this
// node applies past that index (settle). Either way the client learns the
// outcome, rather than an ambiguous OperationTimedOut, unless its request
// times out first. A proposal taken by raft whose entry this node's log
// never recorded (waiter.proposed) has no index to settle on: it is
// answered when applied, or ambiguous when its time runs out.
func (ws *waiters) orphan() {
	ws.mu.Lock()
	var never []*waiter
	for id, w := range ws.m {
		if !w.proposed {
			never = append(never, w)
			delete(ws.m, id)
		} else if !slices.Contains(ws.orphans, w) {
			ws.orphans = append(ws.orphans, w)
		}
	}
	ws.hasOrphans.Store(len(ws.orphans) > 0)
	ws.mu.Unlock()
	for _, w := range never {
		w.ch <- result{err: errNeverLogged}
	}
}

// settle ends the waits of the orphans whose index the replica has
// applied without applying their command: another entry took its place.
func (ws *waiters) settle(applied uint64) {
	ws.mu.Lock()
	var replaced []*waiter
	ws.orphans = slices.DeleteFunc(ws.orphans, func(w *waiter) bool {
		if ws.m[w.id] != w {
			return true // answered: its command was applied
		}
		if w.index == 0 || w.index > applied {
			return false // its index unknown, or not reached yet
		}
		replaced = append(replaced, w)
		delete(ws.m, w.id)
		return true
	})
	ws.hasOrphans.Store(len(ws.orphans) > 0)
	ws.mu.Unlock()
	for _, w := range replaced {
		w.ch <- result{err: errReplaced}
	}
}

// propose puts c in the log and waits for the result of applying it on
// this node. Only the ready leader takes proposals; a proposal whose fate
// this node loses track of (ctx ended after it was handed to the loop, or
// the node stopped after raft took it) is ambiguous: it may yet be
// applied. One whose leader lost the leadership is answered once its fate
// is known (orphan).
func (r *replica) propose(ctx context.Context, c *command.Command, stamps int) (result, error) {
	if err := r.refuseRequest(); err != nil {
		return result{}, err
	}
	n := r.n
	w := r.waiters.add(n.cfg.ID)
	c.ID = w.id
	p := &proposal{r: r, data: c.Append(nil), stamps: stamps, w: w}
	select {
	case n.proposes <- p:
	case <-ctx.Done():
		r.waiters.forget(w)
		return result{}, errBusy("the node's proposal queue is full")
	case <-n.stopped:
		r.waiters.forget(w)
		return result{}, errStoppedUnwritten
	}
	select {
	case res := <-w.ch:
		return res, res.err
	case <-ctx.Done():
		r.waiters.forget(w)
		return result{}, errAmbiguous
	case <-n.stopped:
		return r.waiters.abandon(w)
	}
}

// abandon ends w's wait once the node's loop has exited. A command raft
// never took (queued for the loop, or held back by its gather) never will
// be: nothing was written, and the client may safely ask again. One it
// took may still be committed by the group's next leader: ambiguous. An
// answer on its way (one that took w out of the map before the loop
// exited, or the replica's stop) is the one given.
func (ws *waiters) abandon(w *waiter) (result, error) {
	ws.mu.Lock()
	if ws.m[w.id] != w {
		ws.mu.Unlock()
		res := <-w.ch
		return res, res.err
	}
	delete(ws.m, w.id)
	proposed := w.proposed
	ws.mu.Unlock()
	if proposed {
		return result{}, errAmbiguous
	}
	return result{}, errStoppedUnwritten
}

// proposeAll hands a loop turn's proposals to raft, after the turn's
// messages, each group's as one raft proposal of several entries, in the
// order they came: the leader then sends each follower one append for
// them, not one per entry. (A message that cost this node the leadership
// gets the proposals refused at once, rather than put in a log that will
// lose them.) It returns ps emptied, for reuse.
func (n *Node) proposeAll(ps []*proposal) []*proposal {
	slices.SortStableFunc(ps, func(a, b *proposal) int { return cmp.Compare(a.r.group, b.r.group) })
	for start := 0; start < len(ps); {
		r, end := ps[start].r, start+1
		for end < len(ps) && ps[end].r == r {
			end++
		}
		r.stampAndPropose(ps[start:end])
		n.touch(r)
		start = end
	}
	clear(ps)
	return ps[:0]
}

// stampAndPropose is the loop's part of proposals to r: stamp their
// commit timestamps, in log order, above every timestamp stamped or
// applied, and hand them to raft.
func (r *replica) stampAndPropose(ps []*proposal) {
	refused := r.refuseRequest()
	ents := make([]*raftpb.Entry, 0, len(ps))
	taken := make([]*waiter, 0, len(ps))
	for _, p := range ps {
		if !r.waiters.waiting(p.w) {
			// Answered already (its caller gave up, or a loss of
			// leadership told it nothing was written while it was still
			// queued): it must not be written now, even if this node
			// leads again.
			continue
		}
		if refused != nil {
			r.waiters.done(p.w.id, result{err: refused})
			continue
		}
		if p.stamps > 0 {
			ts := int64(odata.DateTimeFromTime(r.n.cfg.Now()))
			ts = max(ts, r.lastStamp+1, r.appliedTS.Load()+1)
			r.lastStamp = ts + int64(p.stamps) - 1
			command.SetTimestamp(p.data, odata.DateTime(ts))
		}
		ents = append(ents, &raftpb.Entry{Data: p.data})
		taken = append(taken, p.w)
	}
	if len(ents) == 0 {
		return
	}
	r.quiesced.Store(false)
	err := r.rawNode().Step(&raftpb.Message{Type: raftpb.MessageType_MsgProp.Enum(), From: new(r.id), Entries: ents})
	for _, w := range taken {
		if err != nil {
			// Not the leader any more, or too much uncommitted already:
			// not in the log, so nothing happened.
			r.waiters.done(w.id, result{err: errMoved(err.Error())})
		} else {
			r.waiters.proposed(w)
		}
	}
}

// proposed records that raft took w's command (waiter.proposed).
func (ws *waiters) proposed(w *waiter) {
	ws.mu.Lock()
	w.proposed = true
	ws.mu.Unlock()
}
