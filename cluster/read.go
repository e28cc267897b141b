package cluster

import (
	"cmp"
	"context"
	"encoding/binary"
	"slices"

	"go.etcd.io/raft/v3"
)

// readWaiter is a read waiting for the index it may be answered at.
type readWaiter struct {
	r    *replica
	done chan readIndex // buffered
}

type readIndex struct {
	index uint64
	err   error
}

// readBarrier returns once this node may answer a linearizable read: it
// is the leader (confirmed by a quorum after the read began: raft's
// ReadIndex) and has applied everything committed before. Concurrent
// reads share one round.
func (r *replica) readBarrier(ctx context.Context) error {
	if err := r.refuseRequest(); err != nil {
		return err
	}
	n := r.n
	rw := &readWaiter{r: r, done: make(chan readIndex, 1)}
	select {
	case n.reads <- rw:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopped:
		return ErrStopped
	}
	var ri readIndex
	select {
	case ri = <-rw.done:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopped:
		return ErrStopped
	}
	if ri.err != nil {
		return ri.err
	}
	return r.waitApplied(ctx, ri.index)
}

// requestReads asks each group of the reads for one read index for all of
// its reads.
func (n *Node) requestReads(reads []*readWaiter) {
	slices.SortStableFunc(reads, func(a, b *readWaiter) int { return cmp.Compare(a.r.group, b.r.group) })
	for i := 0; i < len(reads); {
		r := reads[i].r
		j := i + 1
		for j < len(reads) && reads[j].r == r {
			j++
		}
		r.requestRead(reads[i:j:j])
		n.touch(r)
		i = j
	}
}

// requestRead asks raft for one read index for a batch of reads.
func (r *replica) requestRead(batch []*readWaiter) {
	if !r.ready.Load() {
		for _, rw := range batch {
			rw.done <- readIndex{err: errNotLeader(r.leader.Load())}
		}
		return
	}
	r.quiesced.Store(false)
	r.readSeq++
	key := binary.BigEndian.AppendUint64(nil, r.readSeq)
	r.readsByCtx[string(key)] = batch
	r.rn.ReadIndex(key)
}

// readDone hands a confirmed read index to its batch.
func (r *replica) readDone(rs raft.ReadState) {
	batch := r.readsByCtx[string(rs.RequestCtx)]
	delete(r.readsByCtx, string(rs.RequestCtx))
	for _, rw := range batch {
		rw.done <- readIndex{index: rs.Index}
	}
}

// failReads ends the reads waiting for an index, when leadership is lost:
// raft drops their requests.
func (r *replica) failReads(err error) {
	for k, batch := range r.readsByCtx {
		for _, rw := range batch {
			rw.done <- readIndex{err: err}
		}
		delete(r.readsByCtx, k)
	}
}
