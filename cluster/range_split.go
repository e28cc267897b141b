package cluster

import (
	"context"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/tabuladb/tabula/cluster/command"
	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
)

// A table's range splits in two steps (docs/cluster.md, step 5). The
// system group records the split for routing (command kind 9,
// split-range): the catalog gives the keys from the split on a range of
// their own, whose group id is that entry's index. The parent group's
// leader, seeing its range in the catalog end before its span does,
// then splits its span in its own log (kind 10, split-group): which
// group owns a key must change at one position of the log that writes
// it. Every parent replica applies that at the same position: its span
// shrinks, the child's span is the rest, and the child group starts on
// the node with the parent's configuration as of the split, the
// entities where they are (no copy). The parent's leader campaigns for
// the child. The child's members then move like any group's.

// SplitTable splits the range of a table that holds PartitionKey at, at
// at: from the system group's ready leader, which records the split (the
// range's group then splits its span). A key that is a range's start
// already is no split, and no error; one no entity could have is
// ErrBadPlacement.
func (n *Node) SplitTable(ctx context.Context, account, table, at string) error {
	if err := odata.ValidateKey("PartitionKey", at); err != nil {
		return fmt.Errorf("%w: split point: %v", ErrBadPlacement, err)
	}
	g, err := n.st().TableGroupFor(account, table, at)
	switch {
	case err != nil:
		return err
	case g.ID == 0:
		return fmt.Errorf("%w: table %s has no range group (the system group replicates it)", ErrBadPlacement, table)
	case at == g.Start:
		return nil
	}
	_, err = n.Store().write(ctx, &command.Command{Kind: command.KindSplitRange, Account: account, Table: table, Group: g.ID, Key: at}, 0)
	return err
}

// maybeSplit proposes, on the ready leader of a range group with no
// change in flight, the split of its span sp that the catalog has
// recorded (spanSplit), once the catalog here has caught up with the
// system group (catalogCaughtUp). It reads the catalog only then: read
// before, it may be older than the index the wait asked for. The child
// is the range that starts where the group's range ends, and takes the
// group's configuration, which is settled (no change in flight: the
// command carries it, so every replica starts the child alike). It
// reports whether it proposed.
func (r *replica) maybeSplit(st raft.Status, sp partition.Span) bool {
	n := r.n
	if !n.catalogCaughtUp(r.group, st.GetTerm(), sp) {
		return false
	}
	work, tg, now := r.spanDue()
	if work != spanSplit || now != sp {
		return false
	}
	child, err := n.st().TableGroupFor(tg.Account, tg.Table, tg.End)
	if err != nil || child.ID == 0 || child.Start != tg.End {
		return false
	}
	last, err := r.rlog.LastIndex()
	if err != nil {
		return false
	}
	c := &command.Command{Kind: command.KindSplitGroup, Account: tg.Account, Table: tg.Table, Group: child.ID, Key: tg.End,
		Voters: slices.Clone(r.conf.GetVoters()), Learners: slices.Clone(r.conf.GetLearners())}
	if err := r.rawNode().Propose(c.Append(nil)); err != nil {
		return false
	}
	delete(n.catalogWaits, r.group)
	r.members.proposed = confMark{last + 1, st.GetTerm()}
	r.quiesced.Store(false)
	n.touch(r)
	n.log.Info("cluster: splitting a range group", "node", n.cfg.ID, "group", r.group, "at", tg.End, "child", child.ID)
	return true
}

// applySplit applies a split of the replica's span (kind 10, entry
// index of its log), on the apply goroutine: the store's spans change
// with the parent's applied index, and the child starts here, as the
// parent's member does, with the configuration the command carries.
//
// The child's log continues the parent's numbering: it starts after
// index, so the members it inherits, whose raft ids carry indexes of the
// parent's log (transport.ReplicaID), are older than any it adds, and
// any of its replicas tells a removed one from a live one by the log it
// has seen. The split is synced before the child's log is bootstrapped:
// a child log must never outlive, in a power loss, the split that
// started it.
func (r *replica) applySplit(ctx context.Context, s *partition.Store, c command.Command, index uint64) error {
	if err := s.SplitGroupSpan(ctx, r.group, c.Group, c.Key); err != nil {
		return err
	}
	if err := s.SyncApplied(r.group, index); err != nil {
		return err
	}
	cs := &raftpb.ConfState{Voters: c.Voters, Learners: c.Learners}
	if hasMember(cs, r.id) {
		r.n.hosts.add(hostChange{group: c.Group, boot: &groupBoot{conf: cs, member: r.id, index: index}, campaign: r.ready.Load()})
	}
	return nil
}

// splitPending says whether a range group that is to be hosted here
// still has its keys in the span of another group hosted here: that
// group, its parent, has not applied the split yet, which starts the
// child here from its own data. Hosting the child before would start it
// empty. A frozen span here over the child's keys counts too, when
// another group hosted here ends where it starts, until that group's
// replica here has caught up with its leader: the catalog merged that
// range and split it again, and that group merges it before it splits
// the child off; a new member, which empties its span first, would
// delete the merge's data. (A frozen span whose merging group is the one
// to host, added here after its merge, does not count: that member's
// snapshot brings the merged keys.) Caught up, that group is past the
// split, which was committed before a message of the child came; the
// frozen span is then a leftover its replica here skipped in a snapshot,
// and the child's snapshot drops it. Waiting for good on it stalled the
// child's member here (chaos merges mode, seeds 317 and 505).
func (n *Node) splitPending(group uint64) bool {
	s := n.st()
	tg, ok, err := s.GroupTable(group)
	if err != nil {
		return true // not known: wait, as for a split not applied yet
	}
	if !ok {
		return false
	}
	ranges, err := s.TableRanges(tg.Account, tg.Table)
	if err != nil {
		return false
	}
	for _, other := range ranges {
		if other.Group.ID == group || !n.hostsGroup(other.Group.ID) {
			continue
		}
		if _, holds, err := s.GroupHolds(other.Group.ID, tg.Account, tg.Table, tg.Group.Start); err == nil && holds {
			return true
		}
	}
	holders, err := s.SpanHolders(group, tg.Span())
	if err != nil {
		return true
	}
	for _, h := range holders {
		if h.Frozen && n.waitsOnMerge(n.splitWaits, group, h.Span, "a split's child's hosting") {
			return true
		}
	}
	return false
}

// catalogWait is a split's wait on the system group: the node's catch-up
// question number when it began, and the group's leader term and span
// then.
type catalogWait struct {
	since, term uint64
	span        partition.Span
}

// catalogCaughtUp says whether this node's catalog has applied what the
// system group had committed when asked after this leadership of the
// group (its term) last saw its span change, to sp: a split is proposed
// only from such a catalog. One that lagged the group's own log split
// off again a child that the group had split off and merged back since
// (on a node that joined the group by a snapshot past the merge, or was
// cut off from the system group: chaos moves mode, seed 2). Born twice,
// the child was frozen and merged twice, and a node that read the first
// merge in the group's record dropped the second child as a leftover
// before the group merged it again, which then stopped that node. The
// catalog entry of any merge the group has applied was committed before
// the group's log took the merge, so a catalog caught up since the span
// last changed has it. The wait restarts with the term too: under
// another leader the span may have changed and come back meanwhile.
// Every replica also refuses the split of a child the group's record
// lists as merged (partition.Store.SplitGroupSpan). It runs on the loop.
func (n *Node) catalogCaughtUp(group, term uint64, sp partition.Span) bool {
	w, ok := n.catalogWaits[group]
	if !ok || w.term != term || w.span != sp {
		w = catalogWait{since: n.catchUpSeq, term: term, span: sp}
		n.catalogWaits[group] = w
	}
	return n.replica.catchUpSince(w.since)
}
