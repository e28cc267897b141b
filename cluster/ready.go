package cluster

import (
	"fmt"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/cluster/transport"
	"github.com/tabuladb/tabula/internal/shrink"
)

// This file holds the loop's handling of raft's Readys: the log writes
// that one loop turn makes for all its replicas, the messages sent after
// them, and the committed entries handed to the apply goroutine.

// handleTouched handles the Readys of the replicas given work in this
// loop turn, until none has one left.
func (n *Node) handleTouched() error {
	var ready []*replica
	for r := range n.touched {
		if r.hasReady() {
			ready = append(ready, r)
		}
	}
	if len(n.touched) > shrink.From {
		// A turn that touched many (a start, a liveness change) leaves no
		// map of their size behind: Go's maps do not shrink.
		n.touched = make(map[*replica]struct{})
	} else {
		clear(n.touched)
	}
	for len(ready) > 0 {
		if err := n.handleReadys(ready); err != nil {
			return err
		}
		ready = slices.DeleteFunc(ready, func(r *replica) bool { return !r.hasReady() })
	}
	return nil
}

// hasReady reports whether the replica has a Ready to handle: raft's, or
// the one an install held, once the install is done.
func (r *replica) hasReady() bool {
	if r.install != nil {
		return r.install.done
	}
	return r.rn != nil && r.rn.HasReady() // a dormant one has none
}

// handleReadys does the Readys of several replicas in raft's order, with
// one write of the raft log for all of them (one fsync for the node):
// persist the logs and hard states (synced when raft says so) before
// sending any message that depends on them (a steady leader's appends
// depend on nothing it writes), then hand the committed entries to the
// apply goroutine (those already on disk before the write), then note
// leadership changes.
func (n *Node) handleReadys(all []*replica) error {
	rs := make([]*replica, 0, len(all))
	rds := make([]raft.Ready, 0, len(all))
	for _, r := range all {
		var rd raft.Ready
		if r.install != nil { // done: hasReady says so
			rd, r.install = r.install.rd, nil
		} else if rd = r.rawNode().Ready(); r.group != systemGroup && !raft.IsEmptySnap(rd.Snapshot) {
			if err := n.startSpanInstall(r, rd); err != nil {
				return err
			}
			continue
		}
		rs, rds = append(rs, r), append(rds, rd)
	}
	early := make([]bool, len(rs))
	// durable counts the committed entries handed to the apply goroutine
	// before the write (applyDurable): none in a turn that installs a
	// snapshot, which replaces the store those entries would meet.
	durable := make([]int, len(rs))
	installs := slices.ContainsFunc(rds, func(rd raft.Ready) bool { return !raft.IsEmptySnap(rd.Snapshot) })
	w := n.cfg.Log.NewWrite()
	write, sync := false, false
	for i, r := range rs {
		rd := rds[i]
		snap := !raft.IsEmptySnap(rd.Snapshot)
		if snap {
			// The store first: a crash after the switch is recovered from
			// the store's pointer (NewNode), or after a span's ingest from
			// its record (hostGroup); one before it from the old store.
			meta := rd.Snapshot.GetMetadata()
			cs := proto.Clone(meta.GetConfState()).(*raftpb.ConfState)
			if r.group == systemGroup {
				if err := n.onApply(func() error { return n.installSnapshot(meta) }); err != nil {
					return err
				}
				n.confMu.Lock()
				n.conf = cs
				n.confMu.Unlock()
			} else {
				r.setConf(meta.GetIndex(), cs) // installed: startSpanInstall
			}
			w.ApplySnapshot(r.group, meta)
		}
		// A leader sends its appends before its own write is durable, so
		// that followers write in parallel (raft thesis §10.2.1). It
		// cannot count its unwritten copy toward a commit: the answers
		// that would commit an entry are stepped by this loop only after
		// the write below. A node that is not, or stops being, the leader
		// sends afterwards, as its votes and acknowledgements must follow
		// what they promise.
		early[i] = r.isLeader && (rd.SoftState == nil || rd.SoftState.RaftState == raft.StateLeader) && !snap
		if early[i] {
			r.send(rd.Messages)
		}
		if !installs {
			durable[i] = n.applyDurable(r, rd)
		}
		if len(rd.Entries) > 0 {
			w.Append(r.group, rd.Entries)
			r.waiters.appended(rd.Entries)
		}
		if !raft.IsEmptyHardState(rd.HardState) {
			w.SetHardState(r.group, rd.HardState)
		}
		write = write || snap || len(rd.Entries) > 0 || !raft.IsEmptyHardState(rd.HardState)
		sync = sync || rd.MustSync || snap
	}
	if write {
		start := time.Now()
		if err := w.Commit(sync); err != nil {
			return fmt.Errorf("cluster: persist raft log: %w", err)
		}
		if sync {
			n.gather.lastWrite = time.Since(start)
		}
	}
	for i, r := range rs {
		rd := rds[i]
		if !early[i] {
			r.send(rd.Messages)
		}
		committed := rd.CommittedEntries[durable[i]:]
		for _, e := range committed {
			if e.GetType() == raftpb.EntryType_EntryConfChange {
				apply := n.applyConfChange
				if r.group != systemGroup {
					apply = r.applyRangeConfChange
				}
				if err := apply(e); err != nil {
					return err
				}
			}
		}
		n.toApply(r, committed)
		for _, rs := range rd.ReadStates {
			r.readDone(rs)
		}
		if rd.SoftState != nil {
			r.leadershipChanged(rd.SoftState)
		}
		r.rawNode().Advance(rd)
		r.checkReady()
	}
	return nil
}

// applyDurable hands the apply goroutine, before the Ready's own write,
// the committed entries at its head that this node's log already holds
// on disk, and returns how many it handed. Applying them need not wait
// for the write, which holds the entries appended since: a leader would
// otherwise apply the commands its followers just acknowledged only after
// the fsync of the commands proposed meanwhile. An entry the write holds
// (new, or rewriting a conflicting tail) waits, lest the store apply an
// entry its log would lose in a crash; so does a configuration change,
// which the loop applies after the write, and every entry after one.
func (n *Node) applyDurable(r *replica, rd raft.Ready) int {
	last, err := r.rlog.LastIndex()
	if err != nil {
		return 0
	}
	k := durablePrefix(last, rd)
	n.toApply(r, rd.CommittedEntries[:k])
	return k
}

// durablePrefix is how many of rd's committed entries may be applied
// before rd's write, for a log whose last durable index is last
// (applyDurable).
func durablePrefix(last uint64, rd raft.Ready) int {
	if len(rd.Entries) > 0 {
		last = min(last, rd.Entries[0].GetIndex()-1)
	}
	k := 0
	for _, e := range rd.CommittedEntries {
		if e.GetIndex() > last || e.GetType() != raftpb.EntryType_EntryNormal {
			break
		}
		k++
	}
	return k
}

// toApply hands committed entries to the apply goroutine.
func (n *Node) toApply(r *replica, ents []*raftpb.Entry) {
	if len(ents) == 0 {
		return
	}
	r.members.seen = max(r.members.seen, ents[len(ents)-1].GetIndex())
	n.applyCh <- applyItem{r: r, ents: ents}
}

// sendGroup hands the transport a group's messages.
func (n *Node) sendGroup(group uint64, msgs []*raftpb.Message) {
	out := make([]transport.Message, len(msgs))
	for i, m := range msgs {
		out[i] = transport.Message{Group: group, Raft: m}
	}
	n.cfg.Transport.Send(out)
}
