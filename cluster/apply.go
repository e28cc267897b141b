package cluster

import (
	"context"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/tabuladb/tabula/cluster/command"
	"github.com/tabuladb/tabula/partition"
)

// applyLoop applies committed entries in log order, one goroutine for
// every group of the node, so a group's commands meet the store in the
// same order on every replica.
func (n *Node) applyLoop() {
	for item := range n.applyCh {
		if n.Err() != nil {
			if item.done != nil {
				item.done <- n.Err()
			}
			continue // stopped by a failure: drain, apply nothing more
		}
		if item.fn != nil {
			err := item.fn()
			if item.done != nil {
				item.done <- err
			}
			continue
		}
		r := item.r
		for _, e := range item.ents {
			if e.GetType() == raftpb.EntryType_EntryNormal && len(e.GetData()) > 0 {
				if err := r.applyEntry(e); err != nil {
					n.fail(err)
					break
				}
			}
			r.advanceApplied(e.GetIndex())
			r.sinceSync++
		}
		if r.sinceSync >= n.cfg.SyncEvery && n.Err() == nil {
			if err := r.syncAndCompact(); err != nil {
				n.fail(err)
			}
			r.sinceSync = 0
		}
	}
}

// applyItem is the apply goroutine's work: committed entries, or a
// function to run between two commands (taking or installing a
// snapshot), whose error is sent to done.
type applyItem struct {
	r    *replica
	ents []*raftpb.Entry
	fn   func() error
	done chan error
}

// st is the node's store now: a snapshot install replaces it.
func (n *Node) st() *partition.Store { return n.store.Load() }

// onApply runs fn on the apply goroutine, between commands, and waits.
func (n *Node) onApply(fn func() error) error {
	done := make(chan error, 1)
	n.applyCh <- applyItem{fn: fn, done: done}
	return <-done
}

// applyEntry applies one command. A refusal (a condition not met, a table
// missing) is the command's result, the same on every replica; a storage
// failure, or an entry that does not decode, stops the node: a replica
// that skipped an entry would no longer be a replica.
func (r *replica) applyEntry(e *raftpb.Entry) error {
	c, err := command.Decode(e.GetData())
	if err != nil {
		return fmt.Errorf("cluster: group %d, entry %d: %w", r.group, e.GetIndex(), err)
	}
	n := r.n
	ctx := partition.WithStamp(context.Background(), partition.Stamp{Group: r.group, Index: e.GetIndex(), Timestamp: c.Timestamp})
	var res result
	s := n.st()
	switch c.Kind {
	case command.KindApply:
		res.entity, res.err = s.Apply(ctx, c.Account, c.Table, c.Ops[0])
	case command.KindBatch:
		res.entities, res.err = s.ExecuteBatch(ctx, c.Account, c.Table, c.Ops)
	case command.KindCreateTable:
		res.table, res.err = s.CreateTable(ctx, c.Account, c.Table)
	case command.KindDeleteTable:
		res.err = s.DeleteTable(ctx, c.Account, c.Table)
	case command.KindSetACL:
		res.err = s.SetTableACL(ctx, c.Account, c.Table, c.ACL)
	case command.KindSetProperties:
		res.err = s.SetServiceProperties(ctx, c.Account, c.Properties)
	}
	if res.err != nil && partition.ErrorCode(res.err) == "" {
		return fmt.Errorf("cluster: group %d: apply entry %d (%s): %w", r.group, e.GetIndex(), c.Kind, res.err)
	}
	if k := len(c.Ops); c.Timestamp != 0 && k > 0 {
		// Raised even for a refused command, whose timestamps were issued,
		// and past the stamp when the store committed above it (Stamp).
		last := int64(c.Timestamp) + int64(k) - 1
		if res.err == nil {
			last = max(last, int64(res.entity.Timestamp))
			for _, se := range res.entities {
				last = max(last, int64(se.Timestamp))
			}
		}
		if last > r.appliedTS.Load() {
			r.appliedTS.Store(last)
		}
	}
	if c.ID>>48 == n.cfg.ID {
		r.waiters.done(c.ID, res)
	}
	return nil
}

// advanceApplied records index as applied and wakes whoever waits for it.
func (r *replica) advanceApplied(index uint64) {
	r.appliedMu.Lock()
	r.applied.Store(index)
	close(r.appliedCh)
	r.appliedCh = make(chan struct{})
	r.appliedMu.Unlock()
	r.checkReady()
}

// waitApplied waits until the replica has applied index.
func (r *replica) waitApplied(ctx context.Context, index uint64) error {
	for {
		r.appliedMu.Lock()
		applied, ch := r.applied.Load(), r.appliedCh
		r.appliedMu.Unlock()
		if applied >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-r.n.stopped:
			return ErrStopped
		}
	}
}

// syncAndCompact makes the applied commands durable in the store and lets
// the system group's raft log go below them, keeping LogRetention entries
// for followers that lag.
func (r *replica) syncAndCompact() error {
	applied := r.applied.Load()
	if err := r.n.st().SyncApplied(r.group, applied); err != nil {
		return err
	}
	if r.group != systemGroup || applied <= r.n.cfg.LogRetention {
		// A range group takes no snapshots yet: a follower behind its
		// first index could never catch up, so its log is kept whole.
		return nil
	}
	to := applied - r.n.cfg.LogRetention
	if first, err := r.rlog.FirstIndex(); err != nil || to < first {
		return err
	}
	return r.rlog.Compact(to)
}

// fail stops the node on a failure that leaves its replica unusable.
func (n *Node) fail(err error) {
	n.failed.CompareAndSwap(nil, &err)
	n.log.Error("cluster: replica failed; the node stops", "err", err)
	n.replicasMu.RLock()
	defer n.replicasMu.RUnlock()
	for _, r := range n.replicas {
		r.stop(err)
	}
}
