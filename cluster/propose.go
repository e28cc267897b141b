package cluster

import (
	"context"
	"sync"

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
}

// waiters are the proposals of this node in flight, by proposal id.
type waiters struct {
	mu   sync.Mutex
	m    map[uint64]*waiter
	next uint64
}

func (ws *waiters) init() { ws.m = make(map[uint64]*waiter) }

// add registers a new waiter with an id unique to this node.
func (ws *waiters) add(node uint64) *waiter {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.next++
	w := &waiter{id: node<<48 | ws.next&(1<<48-1), ch: make(chan result, 1)}
	ws.m[w.id] = w
	return w
}

// done hands a command's result to its waiter, if it is still waiting.
func (ws *waiters) done(id uint64, r result) {
	ws.mu.Lock()
	w := ws.m[id]
	delete(ws.m, id)
	ws.mu.Unlock()
	if w != nil {
		w.ch <- r
	}
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

// failAll ends every wait with err.
func (ws *waiters) failAll(err error) {
	ws.mu.Lock()
	m := ws.m
	ws.m = make(map[uint64]*waiter)
	ws.mu.Unlock()
	for _, w := range m {
		w.ch <- result{err: err}
	}
}

// propose puts c in the log and waits for the result of applying it on
// this node. Only the ready leader takes proposals; a proposal whose fate
// this node loses track of (leadership lost, ctx ended after it was
// handed to raft) is ambiguous: it may yet be applied.
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
		return result{}, ErrStopped
	}
	select {
	case res := <-w.ch:
		return res, res.err
	case <-ctx.Done():
		r.waiters.forget(w)
		return result{}, errAmbiguous
	case <-n.stopped:
		// Queued but perhaps never proposed, or proposed and not yet
		// applied: either way this node can no longer tell.
		r.waiters.forget(w)
		return result{}, errAmbiguous
	}
}

// stampAndPropose is the loop's part of a proposal: stamp its commit
// timestamps, in log order, above every timestamp stamped or applied, and
// hand it to raft.
func (r *replica) stampAndPropose(p *proposal) {
	if err := r.refuseRequest(); err != nil {
		r.waiters.done(p.w.id, result{err: err})
		return
	}
	if p.stamps > 0 {
		ts := int64(odata.DateTimeFromTime(r.n.cfg.Now()))
		ts = max(ts, r.lastStamp+1, r.appliedTS.Load()+1)
		r.lastStamp = ts + int64(p.stamps) - 1
		command.SetTimestamp(p.data, odata.DateTime(ts))
	}
	r.quiesced.Store(false)
	if err := r.rn.Propose(p.data); err != nil {
		// Not the leader any more, or too much uncommitted already:
		// not in the log, so nothing happened.
		r.waiters.done(p.w.id, result{err: errMoved(err.Error())})
	}
}
