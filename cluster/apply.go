package cluster

import (
	"context"
	"fmt"
	"time"

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
		if (item.fn != nil && !item.beside) || item.r == n.replica {
			n.ingests.wait() // see span_install.go
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
			var rp reply
			if e.GetType() == raftpb.EntryType_EntryNormal && len(e.GetData()) > 0 {
				var err error
				if rp, err = r.applyEntry(e); err != nil {
					n.fail(err)
					break
				}
				if n.afterApplyEntry != nil {
					n.afterApplyEntry(r.group, e.GetIndex())
				}
			} else if e.GetType() == raftpb.EntryType_EntryConfChange && r.group != systemGroup {
				// The store's applied index passes a range group's
				// configuration change, though it writes nothing there:
				// a span snapshot taken from now on carries the new
				// configuration, which a member it adds must find itself
				// in.
				if err := n.st().SyncApplied(r.group, e.GetIndex()); err != nil {
					n.fail(err)
					break
				}
			}
			r.advanceAppliedReplying(e.GetIndex(), rp)
			r.sinceSync++
		}
		if (r.sinceSync >= n.cfg.SyncEvery || r.holdsFirstEntry()) && n.Err() == nil {
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
	// beside: fn may run while span ingests are under way (it touches
	// only its own group).
	beside bool
}

// st is the node's store now: a snapshot install replaces it.
func (n *Node) st() *partition.Store { return n.store.Load() }

// onApply runs fn on the apply goroutine, between commands, once no span
// ingest is under way, and waits.
func (n *Node) onApply(fn func() error) error {
	done := make(chan error, 1)
	n.applyCh <- applyItem{fn: fn, done: done}
	return <-done
}

// onApplyBeside is onApply for work on one range group's install that
// may run beside the ingests of others.
func (n *Node) onApplyBeside(fn func() error) error {
	done := make(chan error, 1)
	n.applyCh <- applyItem{fn: fn, done: done, beside: true}
	return <-done
}

// reply is the result of a command this node proposed, for its waiter.
type reply struct {
	id  uint64 // the proposal's id; 0: no waiter here
	res result
}

// applyEntry applies one command and returns the reply its proposer
// waits for, if this node proposed it: the caller hands it over once the
// applied index covers the command (advanceAppliedReplying). A refusal (a
// condition not met, a table missing) is the command's result, the same
// on every replica; a storage failure, or an entry that does not decode,
// stops the node: a replica that skipped an entry would no longer be a
// replica.
func (r *replica) applyEntry(e *raftpb.Entry) (reply, error) {
	c, err := command.Decode(e.GetData())
	if err != nil {
		return reply{}, fmt.Errorf("cluster: group %d, entry %d: %w", r.group, e.GetIndex(), err)
	}
	n := r.n
	ctx := partition.WithStamp(context.Background(), partition.Stamp{Group: r.group, Index: e.GetIndex(), Timestamp: c.Timestamp})
	var res result
	var refused error // an answer of the cluster's, not the store's
	s := n.st()
	spanKind := c.Kind == command.KindSplitGroup || c.Kind == command.KindFreezeGroup || c.Kind == command.KindMergeGroup
	rangeKind := c.Kind == command.KindApply || c.Kind == command.KindBatch || spanKind
	if r.group != systemGroup && !rangeKind || r.group == systemGroup && spanKind {
		// The catalog is the system group's: a range group's log changes
		// it nowhere, or the nodes outside the group would not agree; a
		// span is a range group's own.
		c.Kind, refused = 0, errBusy(fmt.Sprintf("a %s command in group %d's log", c.Kind, r.group))
	}
	switch c.Kind {
	case command.KindApply, command.KindBatch:
		if refused, err = r.wrongGroup(s, c.Account, c.Table, c.Ops[0].Entity.PartitionKey); err != nil {
			return reply{}, fmt.Errorf("cluster: group %d, entry %d: %w", r.group, e.GetIndex(), err)
		}
		switch {
		case refused != nil:
		case c.Kind == command.KindApply:
			res.entity, res.err = s.Apply(ctx, c.Account, c.Table, c.Ops[0])
		default:
			res.entities, res.err = s.ExecuteBatch(ctx, c.Account, c.Table, c.Ops)
		}
	case command.KindCreateTable:
		res.table, res.err = s.CreateTable(ctx, c.Account, c.Table)
	case command.KindCreateRangeTable:
		g := partition.RangeGroup{ID: e.GetIndex(), Voters: c.Voters}
		res.table, res.err = s.CreateTableInGroup(ctx, c.Account, c.Table, g)
		switch {
		case res.err != nil:
		case g.Has(n.cfg.ID):
			// The system group's leader proposed it: it campaigns.
			n.hosts.add(hostChange{group: g.ID, campaign: n.replica.ready.Load(),
				boot: &groupBoot{conf: &raftpb.ConfState{Voters: c.Voters}, member: n.cfg.ID, index: partition.GroupStartIndex}})
		default:
			// A member here added later, which this node's replay after a
			// power loss found in its raft log but not in its catalog.
			n.hosts.add(hostChange{group: g.ID})
		}
	case command.KindDeleteTable:
		groups := n.tableGroupIDs(s, c.Account, c.Table)
		res.err = s.DeleteTable(ctx, c.Account, c.Table)
		if res.err == nil && len(groups) > 0 {
			// The drop durable before the groups' logs go: a restart
			// that found the table again would host the groups, and
			// replay them, from logs that are no longer there.
			if err := s.SyncApplied(r.group, e.GetIndex()); err != nil {
				return reply{}, err
			}
			for _, g := range groups {
				n.hosts.add(hostChange{group: g, drop: true})
			}
		}
	case command.KindSplitRange:
		res.err = s.SplitTableRange(ctx, c.Account, c.Table, c.Group, c.Key, e.GetIndex())
		if res.err == nil {
			n.hosts.add(hostChange{group: c.Group, wake: true}) // its leader has a split to make
			n.hosts.add(hostChange{group: e.GetIndex()})        // as for a table's creation
		}
	case command.KindMergeRange:
		right, _ := s.TableRangeFor(c.Account, c.Table, c.Key)
		res.err = s.MergeTableRange(ctx, c.Account, c.Table, c.Group, c.Key)
		if res.err == nil {
			// The right group's leader has a freeze to make, the left's a
			// merge.
			n.hosts.add(hostChange{group: right.Group.ID, wake: true})
			n.hosts.add(hostChange{group: c.Group, wake: true})
			if err := n.forgetRetired(right.Group.ID); err != nil {
				return reply{}, err
			}
			// This node's replica of the left group may hold the right
			// one's keys already, from a snapshot made past the merge
			// while its catalog lagged (forgetMergedInto found the right
			// group still named then).
			if sp, ok := n.groupSpan(c.Group); ok && n.hostsGroup(c.Group) {
				if err := n.forgetMergedInto(c.Group, sp); err != nil {
					return reply{}, err
				}
			}
		}
	case command.KindSplitGroup:
		res.err = r.applySplit(ctx, s, c, e.GetIndex())
	case command.KindFreezeGroup:
		res.err = r.applyFreeze(ctx, s)
	case command.KindMergeGroup:
		res.err = r.applyMerge(ctx, s, c)
	case command.KindSetRangeVoters:
		res.err = s.SetGroupVoters(ctx, c.Account, c.Table, c.Group, c.Voters)
		if res.err == nil {
			// The group's leader here has members to move; a member here
			// that is to go ticks again, to learn it went.
			n.markMoving(c.Group)
			n.hosts.add(hostChange{group: c.Group, wake: true})
			n.names.note(c.Group, time.Now())
		}
	case command.KindSetACL:
		res.err = s.SetTableACL(ctx, c.Account, c.Table, c.ACL)
	case command.KindSetProperties:
		res.err = s.SetServiceProperties(ctx, c.Account, c.Properties)
	case command.KindNodeDown:
		var since time.Time
		if c.Since != 0 {
			since = time.Unix(0, c.Since)
		}
		res.err = s.SetNodeDown(ctx, c.Node, since)
	}
	if res.err != nil && partition.ErrorCode(res.err) == "" {
		return reply{}, fmt.Errorf("cluster: group %d: apply entry %d (%s): %w", r.group, e.GetIndex(), c.Kind, res.err)
	}
	if refused != nil {
		res.err = refused
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
	if c.ID>>48 != n.cfg.ID {
		return reply{}, nil
	}
	return reply{id: c.ID, res: res}, nil
}

// advanceApplied records index as applied and wakes whoever waits for it.
func (r *replica) advanceApplied(index uint64) { r.advanceAppliedReplying(index, reply{}) }

// advanceAppliedReplying is advanceApplied for the entry at index, whose
// command's proposer waits here for rp. The reply goes after the index is
// recorded: a client that has its answer finds the replica's applied index
// past its write (a read on this replica waits for the index before it
// reads; a test waits for replicas to apply as far as the furthest), and
// with the reply before it, a replica could be seen applied short of a
// write already acknowledged. And it goes before the orphans are settled,
// which take a waiter still waiting at an applied index as one whose entry
// was replaced.
func (r *replica) advanceAppliedReplying(index uint64, rp reply) {
	r.appliedMu.Lock()
	r.applied.Store(index)
	if r.appliedCh != nil {
		close(r.appliedCh)
		r.appliedCh = nil
	}
	r.appliedMu.Unlock()
	if rp.id != 0 && r.waiters.done(rp.id, rp.res) {
		r.n.gather.answered.Add(1)
	}
	if r.waiters.hasOrphans.Load() {
		r.waiters.settle(index)
	}
	r.checkReady()
}

// waitApplied waits until the replica has applied index.
func (r *replica) waitApplied(ctx context.Context, index uint64) error {
	for {
		r.appliedMu.Lock()
		if r.applied.Load() >= index {
			r.appliedMu.Unlock()
			return nil
		}
		if r.appliedCh == nil {
			r.appliedCh = make(chan struct{})
		}
		ch := r.appliedCh
		r.appliedMu.Unlock()
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
// the group's raft log go below them, keeping LogRetention entries for
// followers that lag (further behind, they take a snapshot).
func (r *replica) syncAndCompact() error {
	applied := r.applied.Load()
	if err := r.n.st().SyncApplied(r.group, applied); err != nil {
		return err
	}
	// A group's first entry goes as soon as it is applied: the founders'
	// configuration was bootstrapped, not logged, so a node that joins,
	// or a member added to a range group, must start from a snapshot
	// (which carries it), never from entry 1.
	to := uint64(0)
	canSnapshot := r.canSnapshot()
	if frozen, err := r.n.st().GroupFrozen(r.group); err != nil || frozen {
		// A frozen group sends no snapshot: its followers catch up from
		// its log.
		return err
	}
	if canSnapshot {
		to = 1
	}
	if applied > r.n.cfg.LogRetention && canSnapshot {
		to = applied - r.n.cfg.LogRetention
	}
	if to == 0 {
		return nil
	}
	if first, err := r.rlog.FirstIndex(); err != nil || to < first || to > applied {
		return err
	}
	return r.rlog.Compact(to)
}

// canSnapshot says whether the group can send a follower a snapshot, so
// its log may be compacted: the system group always (of the whole
// store); a range group of its table's span, which a group hostGroup was
// given with no table (in tests) has not.
func (r *replica) canSnapshot() bool {
	if r.group == systemGroup {
		return true
	}
	_, ok := r.n.groupSpan(r.group)
	return ok
}

// holdsFirstEntry says whether a group's log still holds its first
// entry once it is applied, which syncAndCompact drops if the group can
// send snapshots.
func (r *replica) holdsFirstEntry() bool {
	if r.applied.Load() < 1 {
		return false
	}
	first, err := r.rlog.FirstIndex()
	return err == nil && first == 1 && r.canSnapshot()
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
