package cluster

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/tabuladb/tabula/cluster/command"
	"github.com/tabuladb/tabula/partition"
)

// A range group replicates the entity writes of one table beside the
// system group, on the same nodes, into the same store: its commands are
// stamped with its own group id, so the store keeps its applied index
// apart (partition.Stamp), and its log lives in the node's raft log under
// its id. With Config.RangeGroups, a table is created with a group of its
// own: the leader that proposes the creation picks the voters, the
// group's id is the index of the creation's entry, and every replica
// records the pair in the table's catalog entry (partition.RangeGroup) as
// it applies it, so the descriptor is replicated with the catalog. A node
// hosts the groups it is a voter of from then on, and drops a group (its
// replica and its log) with its table. A replica that falls behind its
// peers' compacted logs catches up from a snapshot of the table's span
// (range_snapshot.go). Its members move as its descriptor says
// (range_members.go). What is not built yet (docs/cluster.md): splits of
// a table into several groups.

// hostGroup adds this node's replica of range group id, before the node
// runs or from its loop. A group with state in the raft log restarts
// from it, as the member its replica record names (the node's own id
// when none: a founding member); a group whose member here was retired
// is not hosted. A group with no state at all is bootstrapped as boot
// says (its table's creation, or its parent's split, is being applied)
// and is otherwise not hosted: the node hosts a member there when a
// message for one comes (hostMember).
func (n *Node) hostGroup(id uint64, boot *groupBoot) error {
	if id == systemGroup || id == 0 {
		return fmt.Errorf("cluster: group %d is not a range group", id)
	}
	if n.hostsGroup(id) {
		return fmt.Errorf("cluster: group %d is hosted already", id)
	}
	_, err := n.startReplica(id, boot, nil)
	return err
}

// startReplica starts this node's replica of range group id from its
// raft log and the store, as hostGroup says, and returns it (nil when the
// group is not to be hosted). A replica loaded again (unload.go) starts
// dormant, without its raft state machine (dormant.go), with what its
// record kept, and takes the record's place.
func (n *Node) startReplica(id uint64, boot *groupBoot, from *unloadedReplica) (*replica, error) {
	st, err := n.cfg.Log.Group(id)
	if err != nil {
		return nil, fmt.Errorf("cluster: group %d: %w", id, err)
	}
	rec := st.Replica()
	if rec.Removed {
		return nil, nil
	}
	fresh := st.Empty() // see replica.voteAfter
	if fresh {
		if boot == nil {
			return nil, nil
		}
		member := boot.member
		if member == n.cfg.ID {
			member = 0 // a founder's: its node's id, which needs no record
		}
		if err := st.BootstrapMember(boot.conf, member, boot.index, 1); err != nil {
			return nil, fmt.Errorf("cluster: group %d: bootstrap: %w", id, err)
		}
		rec = st.Replica()
	}
	member := rec.ID
	if member == 0 {
		member = n.cfg.ID
	}
	hs, _, err := st.InitialState()
	if err != nil {
		return nil, fmt.Errorf("cluster: group %d: read raft state: %w", id, err)
	}
	applied, err := n.st().AppliedIndex(id)
	if err != nil {
		return nil, err
	}
	if applied > hs.GetCommit() {
		// As for the system group (NewNode): the store applied entries the
		// hard state does not say are committed; and a span snapshot the
		// store ingested may not be in the log yet (the node crashed
		// between the two), as its record says.
		first, err := st.FirstIndex()
		if err != nil {
			return nil, fmt.Errorf("cluster: group %d: read raft log: %w", id, err)
		}
		last, err := st.LastIndex()
		if err != nil {
			return nil, fmt.Errorf("cluster: group %d: read raft log: %w", id, err)
		}
		w := n.cfg.Log.NewWrite()
		if rec := n.recordedRangeSnapshot(id, applied); rec != nil && first <= applied {
			w.ApplySnapshot(id, rec)
		} else if applied > last {
			return nil, fmt.Errorf("cluster: group %d: the store applied entry %d, past the raft log's last, %d", id, applied, last)
		}
		w.SetHardState(id, &raftpb.HardState{Term: hs.Term, Vote: hs.Vote, Commit: &applied})
		if err := w.Commit(true); err != nil {
			return nil, fmt.Errorf("cluster: group %d: record commit index: %w", id, err)
		}
	}
	gs := &groupStorage{Storage: st}
	r, err := newReplica(n, id, member, st, gs, applied, fresh, from != nil)
	if err != nil {
		return nil, err
	}
	gs.snapshot = r.leaderSpanSnapshot
	r.members.seen = max(applied, st.Replica().ConfIndex)
	if from != nil {
		r.restore(from)
	}
	n.replicasMu.Lock()
	_, _, err = n.dropUnloaded(id)
	if err == nil {
		n.replicas[id] = r
		n.replicaList = append(n.replicaList, r)
	}
	n.replicasMu.Unlock()
	if err != nil {
		return nil, err
	}
	return r, nil
}

// errNoGroup is returned for a group the node does not host.
var errNoGroup = errors.New("cluster: this node hosts no such group")

// catalogKnew says whether this node's catalog has met range group id: a
// group's id is the index of the system group's entry that made it (a
// table's creation, a split), so past this node's applied index the
// catalog cannot name it yet (a split's child its parent's log started
// here, its own record not applied); at or below
// it, a group the catalog does not name is one it stopped naming (merged
// away, or its table dropped).
func (n *Node) catalogKnew(id uint64) bool { return n.applied.Load() >= id }

// group returns the node's replica of group id, or nil: none hosted, or
// one unloaded (groupLoaded loads it).
func (n *Node) group(id uint64) *replica {
	n.replicasMu.RLock()
	defer n.replicasMu.RUnlock()
	return n.replicas[id]
}

// applyInGroup proposes an entity write to range group id and returns the
// stored entity, as Store.Apply does for the system group.
func (n *Node) applyInGroup(ctx context.Context, id uint64, account, table string, op partition.Op) (partition.StoredEntity, error) {
	r := n.groupLoaded(ctx, id)
	if r == nil {
		return partition.StoredEntity{}, errNoGroup
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	res, err := r.propose(ctx, &command.Command{Kind: command.KindApply, Account: account, Table: table, Ops: []partition.Op{op}}, 1)
	return res.entity, err
}

// getInGroup reads an entity linearizably through range group id: after a
// read round of the group, from this node's store.
func (n *Node) getInGroup(ctx context.Context, id uint64, account, table, pk, rk string) (partition.StoredEntity, error) {
	r := n.groupLoaded(ctx, id)
	if r == nil {
		return partition.StoredEntity{}, errNoGroup
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	if err := r.readBarrier(ctx); err != nil {
		return partition.StoredEntity{}, err
	}
	return n.st().GetEntity(ctx, account, table, pk, rk)
}
