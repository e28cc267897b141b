package cluster

import (
	"context"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/tabuladb/tabula/cluster/command"
	"github.com/tabuladb/tabula/partition"
)

// applyLoop applies committed entries in log order, one goroutine for the
// group, so commands meet the store in the same order on every replica.
func (n *Node) applyLoop() {
	sinceSync := uint64(0)
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
		for _, e := range item.ents {
			if e.GetType() == raftpb.EntryType_EntryNormal && len(e.GetData()) > 0 {
				if err := n.applyEntry(e); err != nil {
					n.fail(err)
					break
				}
			}
			n.advanceApplied(e.GetIndex())
			sinceSync++
		}
		if sinceSync >= n.cfg.SyncEvery && n.Err() == nil {
			if err := n.syncAndCompact(); err != nil {
				n.fail(err)
			}
			sinceSync = 0
		}
	}
}

// applyItem is the apply goroutine's work: committed entries, or a
// function to run between two commands (taking or installing a
// snapshot), whose error is sent to done.
type applyItem struct {
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
func (n *Node) applyEntry(e *raftpb.Entry) error {
	c, err := command.Decode(e.GetData())
	if err != nil {
		return fmt.Errorf("cluster: entry %d: %w", e.GetIndex(), err)
	}
	ctx := partition.WithStamp(context.Background(), partition.Stamp{Group: group, Index: e.GetIndex(), Timestamp: c.Timestamp})
	var r result
	s := n.st()
	switch c.Kind {
	case command.KindApply:
		r.entity, r.err = s.Apply(ctx, c.Account, c.Table, c.Ops[0])
	case command.KindBatch:
		r.entities, r.err = s.ExecuteBatch(ctx, c.Account, c.Table, c.Ops)
	case command.KindCreateTable:
		r.table, r.err = s.CreateTable(ctx, c.Account, c.Table)
	case command.KindDeleteTable:
		r.err = s.DeleteTable(ctx, c.Account, c.Table)
	case command.KindSetACL:
		r.err = s.SetTableACL(ctx, c.Account, c.Table, c.ACL)
	case command.KindSetProperties:
		r.err = s.SetServiceProperties(ctx, c.Account, c.Properties)
	}
	if r.err != nil && partition.ErrorCode(r.err) == "" {
		return fmt.Errorf("cluster: apply entry %d (%s): %w", e.GetIndex(), c.Kind, r.err)
	}
	if k := len(c.Ops); c.Timestamp != 0 && k > 0 {
		// Raised even for a refused command, whose timestamps were issued,
		// and past the stamp when the store committed above it (Stamp).
		last := int64(c.Timestamp) + int64(k) - 1
		if r.err == nil {
			last = max(last, int64(r.entity.Timestamp))
			for _, se := range r.entities {
				last = max(last, int64(se.Timestamp))
			}
		}
		if last > n.appliedTS.Load() {
			n.appliedTS.Store(last)
		}
	}
	if c.ID>>48 == n.cfg.ID {
		n.waiters.done(c.ID, r)
	}
	return nil
}

// advanceApplied records index as applied and wakes whoever waits for it.
func (n *Node) advanceApplied(index uint64) {
	n.appliedMu.Lock()
	n.applied.Store(index)
	close(n.appliedCh)
	n.appliedCh = make(chan struct{})
	n.appliedMu.Unlock()
	n.checkReady()
}

// waitApplied waits until the node has applied index.
func (n *Node) waitApplied(ctx context.Context, index uint64) error {
	for {
		n.appliedMu.Lock()
		applied, ch := n.applied.Load(), n.appliedCh
		n.appliedMu.Unlock()
		if applied >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-n.stopped:
			return ErrStopped
		}
	}
}

// syncAndCompact makes the applied commands durable in the store and lets
// the raft log go below them, keeping LogRetention entries for followers
// that lag.
func (n *Node) syncAndCompact() error {
	applied := n.applied.Load()
	if err := n.st().SyncApplied(group, applied); err != nil {
		return err
	}
	if applied <= n.cfg.LogRetention {
		return nil
	}
	to := applied - n.cfg.LogRetention
	if first, err := n.rlog.FirstIndex(); err != nil || to < first {
		return err
	}
	return n.rlog.Compact(to)
}

// fail stops the node on a failure that leaves its replica unusable.
func (n *Node) fail(err error) {
	n.failed.CompareAndSwap(nil, &err)
	n.log.Error("cluster: replica failed; the node stops", "err", err)
	n.ready.Store(false)
	n.waiters.failAll(err)
}
