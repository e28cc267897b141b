package cluster

import (
	"context"
	"encoding/binary"

	"go.etcd.io/raft/v3"
)

// readWaiter is a read waiting for the index it may be answered at.
type readWaiter struct {
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
func (n *Node) readBarrier(ctx context.Context) error {
	if !n.ready.Load() {
		return errNotLeader(n.leader.Load())
	}
	r := &readWaiter{done: make(chan readIndex, 1)}
	select {
	case n.reads <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopped:
		return ErrStopped
	}
	var ri readIndex
	select {
	case ri = <-r.done:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopped:
		return ErrStopped
	}
	if ri.err != nil {
		return ri.err
	}
	return n.waitApplied(ctx, ri.index)
}

// requestRead asks raft for one read index for a batch of reads.
func (n *Node) requestRead(batch []*readWaiter) {
	if !n.ready.Load() {
		for _, r := range batch {
			r.done <- readIndex{err: errNotLeader(n.leader.Load())}
		}
		return
	}
	n.readSeq++
	key := binary.BigEndian.AppendUint64(nil, n.readSeq)
	n.readsByCtx[string(key)] = batch
	n.rn.ReadIndex(key)
}

// readDone hands a confirmed read index to its batch.
func (n *Node) readDone(rs raft.ReadState) {
	batch := n.readsByCtx[string(rs.RequestCtx)]
	delete(n.readsByCtx, string(rs.RequestCtx))
	for _, r := range batch {
		r.done <- readIndex{index: rs.Index}
	}
}

// failReads ends the reads waiting for an index, when leadership is lost:
// raft drops their requests.
func (n *Node) failReads(err error) {
	for k, batch := range n.readsByCtx {
		for _, r := range batch {
			r.done <- readIndex{err: err}
		}
		delete(n.readsByCtx, k)
	}
}
