package cluster

import (
	"cmp"
	"context"
	"iter"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"

	"github.com/tabuladb/tabula/partition"
)

// progress is a peer's replication as the leader tracks it.
type progress struct {
	Match  uint64
	Active bool
}

// nodeStatus is the loop's last picture of the node, for Status.
type nodeStatus struct {
	Status
	progress map[uint64]progress
	live     map[uint64]bool // the peers heard from within an election timeout
}

// snapshotStatus records the node's raft state for readers on other
// goroutines; the loop calls it on every tick.
func (n *Node) snapshotStatus() {
	st := n.rn.Status()
	ns := &nodeStatus{
		Status: Status{
			Node:    n.cfg.ID,
			Leader:  st.Lead,
			State:   st.RaftState.String(),
			Ready:   n.ready.Load(),
			Term:    st.GetTerm(),
			Commit:  st.GetCommit(),
			Applied: n.applied.Load(),
		},
		progress: make(map[uint64]progress, len(st.Progress)),
		live:     make(map[uint64]bool, len(n.live.heard)),
	}
	for id := range n.live.heard {
		ns.live[id] = n.isLive(id)
	}
	for _, r := range n.replicaList {
		if r.group == systemGroup {
			continue
		}
		ns.RangeGroups++
		if r.quiesced.Load() {
			ns.Quiesced++
		}
		if r.dormant() {
			ns.Dormant++
		}
	}
	n.replicasMu.RLock()
	ns.Unloaded = n.unloadedCount
	n.replicasMu.RUnlock()
	ns.RangeGroups += ns.Unloaded
	ns.Quiesced += ns.Unloaded
	ns.Dormant += ns.Unloaded
	if st.RaftState == raft.StateLeader {
		for id, pr := range st.Progress {
			ns.progress[id] = progress{Match: pr.Match, Active: pr.RecentActive || id == n.cfg.ID || pr.State == tracker.StateReplicate}
		}
	}
	n.status.Store(ns)
}

// Status returns what the node knows of itself and, when it leads, of
// its peers' replication, as of its last tick.
func (n *Node) Status() nodeStatus {
	var st nodeStatus
	if p := n.status.Load(); p != nil {
		st = *p
	}
	st.Applied = n.applied.Load()
	st.Ready = n.ready.Load()
	st.DormantWakes = n.dormantWakes.Load()
	st.ReplicaLoads = n.replicaLoads.Load()
	if err := n.Err(); err != nil {
		st.Failed = err.Error()
	}
	n.snaps.mu.Lock()
	st.SnapshotsMade, st.SnapshotsInstalled = n.snaps.made, n.snaps.installed
	st.SpanSnapshotsMade, st.SpanSnapshotsInstalled = n.snaps.spanMade, n.snaps.spanInstalled
	n.snaps.mu.Unlock()
	return st
}

// ranges lists the range partitions of the tables this node answers
// for (eachRange).
func (n *Node) ranges(ctx context.Context) []RangeStatus {
	return slices.Collect(n.eachRange(ctx))
}

// eachRange yields the range partitions of the tables this node answers
// for: those of its range groups it leads, and, when it leads the system
// group, those of the tables without a range group. Their statistics are
// the leaseholder's, which serves the reads. A table dropped while it is
// walked is left out. One status is made at a time, so a report costs
// memory per table, not per range of the node.
func (n *Node) eachRange(ctx context.Context) iter.Seq[RangeStatus] {
	return func(yield func(RangeStatus) bool) {
		st := n.st()
		// Walked, not listed: a node reports what it leads, and the catalog
		// is every table of the cluster.
		tables := func(each func(partition.CatalogTable) bool) {
			if err := st.EachCatalogTable(each); err != nil {
				n.log.Warn("range report: reading the catalog", "err", err)
			}
		}
		for t := range tables {
			if len(t.Groups) == 0 {
				// The system group replicates the table: its leader reports
				// the table's range partitions.
				if !n.ready.Load() {
					continue
				}
				infos, err := st.Ranges(ctx, t.Account, t.Name)
				if err != nil {
					continue
				}
				n.confMu.Lock()
				voters := slices.Clone(n.conf.GetVoters())
				n.confMu.Unlock()
				for _, ri := range infos {
					if !yield(RangeStatus{Account: t.Account, Table: t.Name, RangeInfo: ri, Group: systemGroup,
						Replicas: voters, Members: voters, Leaseholder: n.cfg.ID}) {
						return
					}
				}
				continue
			}
			// One status per range group this node leads: its range, with
			// the statistics of the range partitions that start in it. A
			// table is opened for its statistics only if this node leads one
			// of its groups.
			var infos []partition.RangeInfo
			for _, tg := range t.Groups {
				rs := RangeStatus{Account: t.Account, Table: t.Name, Group: tg.Group.ID, Replicas: tg.Group.Voters, Leaseholder: n.cfg.ID}
				if r := n.group(tg.Group.ID); r != nil && r.holdsLease() {
					cs := r.confState()
					rs.Members, rs.Learners = nodesOf(cs.GetVoters()), nodesOf(cs.GetLearners())
				} else if u, ok := n.unloadedReplica(tg.Group.ID); ok && u.dormantLeader {
					// Not loaded for this (the placement asks every few
					// seconds): its members are its descriptor's, with no
					// change of them under way; none known while one is to
					// start (so the range is not settled).
					if !u.moving {
						rs.Members = tg.Group.Voters
					}
				} else {
					continue
				}
				rs.StartPartitionKey, rs.EndPartitionKey = tg.Group.Start, tg.End
				if infos == nil {
					var err error
					if infos, err = st.Ranges(ctx, t.Account, t.Name); err != nil {
						break // dropped meanwhile
					}
				}
				for _, ri := range infos {
					if tg.Span().Contains(ri.StartPartitionKey) {
						rs.Entities += ri.Entities
						rs.Bytes += ri.Bytes
						rs.ReadsPerSecond += ri.ReadsPerSecond
						rs.WritesPerSecond += ri.WritesPerSecond
						rs.Partitions = append(rs.Partitions, ri)
					}
				}
				if !yield(rs) {
					return
				}
			}
		}
	}
}

// groupStatus lists the range groups this node hosts, by id.
func (n *Node) groupStatus() []GroupStatus {
	n.replicasMu.RLock()
	out := make([]GroupStatus, 0, len(n.replicas))
	for id, r := range n.replicas {
		if id != systemGroup {
			cs := r.confState()
			out = append(out, GroupStatus{Group: id, Leader: r.leader.Load(), Applied: r.applied.Load(),
				Voters: nodesOf(cs.GetVoters()), Learners: nodesOf(cs.GetLearners())})
		}
	}
	err := n.eachUnloaded(func(id uint64, u unloadedReplica) bool {
		// Read without loading it: the voters from the catalog (an
		// unloaded replica has no change of them under way).
		gs := GroupStatus{Group: id, Leader: u.leader, Applied: u.applied, Unloaded: true}
		if tg, ok, _ := n.st().GroupTable(id); ok {
			gs.Voters = slices.Clone(tg.Group.Voters)
		}
		out = append(out, gs)
		return true
	})
	n.replicasMu.RUnlock()
	if err != nil {
		n.fail(err)
	}
	slices.SortFunc(out, func(a, b GroupStatus) int { return cmp.Compare(a.Group, b.Group) })
	return out
}
