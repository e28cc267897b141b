package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"slices"
	"sync"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/vfs"
)

// A span snapshot's ingest writes the whole span into the store twice
// (staged, then moved; partition.Store.IngestSpan): seconds for a range
// near its split size. Run on the loop's turn, it would stop every group
// of the node for as long: no heartbeats, no liveness, leases lost
// elsewhere. So it runs on a goroutine of its own, while the loop goes on
// with the other groups and holds the group's Ready, which raft lets it
// do (it may step messages and tick meanwhile, but asks for no other
// Ready before the held one is advanced). The apply goroutine goes on
// applying the other range groups' commands beside it (the store orders
// writes to the span's table behind the move); the system group's
// commands and the node's other work on the apply goroutine (a snapshot
// of the whole store, a group's drop) wait for the ingests under way, as
// they waited for an install before. The steps before and after the
// ingest stay on the apply goroutine, in order with the group's entries.

// spanInstall is a range replica's span snapshot install under way: the
// Ready raft handed the snapshot in, held until done.
type spanInstall struct {
	rd   raft.Ready
	done bool
}

// ingestGate counts the ingests under way, for the apply goroutine's work
// that must not run beside one.
type ingestGate struct {
	mu       sync.Mutex
	cond     sync.Cond
	running  int
	finished []finishedIngest // for the loop, in the order they ended
	wake     chan struct{}    // the loop's signal that finished grew
	wg       sync.WaitGroup   // the ingest goroutines, for Run's end
}

type finishedIngest struct {
	r       *replica
	staged  *stagedSpan
	applied uint64
	err     error
}

func (g *ingestGate) init() {
	g.cond.L = &g.mu
	g.wake = make(chan struct{}, 1)
}

// wait returns once no ingest is under way.
func (g *ingestGate) wait() {
	g.mu.Lock()
	for g.running > 0 {
		g.cond.Wait()
	}
	g.mu.Unlock()
}

// startSpanInstall begins the install of the span snapshot in rd, a Ready
// of range replica r, and holds rd until it is done (finishSpanInstalls).
func (n *Node) startSpanInstall(r *replica, rd raft.Ready) error {
	meta := rd.Snapshot.GetMetadata()
	g := &n.ingests
	var job *stagedSpan // what to ingest: the staged snapshot raft accepted
	if err := n.onApplyBeside(func() (err error) {
		job, err = r.beginSpanInstall(meta)
		if job != nil {
			// Counted here, so that nothing the apply goroutine takes
			// after this step runs beside the ingest unless it may.
			g.mu.Lock()
			g.running++
			g.mu.Unlock()
		}
		return err
	}); err != nil {
		return err
	}
	r.install = &spanInstall{rd: rd}
	if job == nil { // nothing to ingest: the Ready goes on at once
		r.install.done = true
		n.touch(r)
		return nil
	}
	g.wg.Add(1)
	st := n.st() // the store cannot be switched under an ingest: see ingestGate
	go func() {
		defer g.wg.Done()
		fin := finishedIngest{r: r, staged: job}
		fin.applied, fin.err = r.ingestSpan(st, job)
		g.mu.Lock()
		g.running--
		g.finished = append(g.finished, fin)
		g.cond.Broadcast()
		g.mu.Unlock()
		select {
		case g.wake <- struct{}{}:
		default:
		}
	}()
	return nil
}

// finishSpanInstalls, on the loop, ends the installs whose ingest is done
// and lets their Readys go on. A failed ingest stops the node, as a failed
// apply does.
func (n *Node) finishSpanInstalls() error {
	g := &n.ingests
	g.mu.Lock()
	fins := g.finished
	g.finished = nil
	g.mu.Unlock()
	for _, fin := range fins {
		r := fin.r
		if errors.Is(fin.err, errMergedOver) {
			if err := n.dropMergedOver(r); err != nil {
				return err
			}
			continue
		}
		if fin.err != nil {
			return fin.err
		}
		if n.group(r.group) != r || r.install == nil {
			continue // no longer hosted: its drop came after the ingest
		}
		if err := n.onApplyBeside(func() error { return r.endSpanInstall(fin.staged, fin.applied) }); err != nil {
			return err
		}
		r.install.done = true
		n.touch(r)
	}
	return nil
}

// beginSpanInstall takes the staged span snapshot raft accepted and
// records it beside the store, so that a crash after the ingest and
// before the raft log records it is repaired at the next start
// (recordedRangeSnapshot). It returns nil when there is nothing to ingest
// (the table was dropped while the install waited behind the drop).
func (r *replica) beginSpanInstall(meta *raftpb.SnapshotMetadata) (*stagedSpan, error) {
	n := r.n
	fs := n.dir.fs
	r.spans.mu.Lock()
	st := r.spans.staged[meta.GetIndex()]
	delete(r.spans.staged, meta.GetIndex())
	r.spans.removeStaged(fs, meta.GetIndex()) // older ones are of no use now
	r.spans.mu.Unlock()
	if st == nil || st.meta.GetTerm() != meta.GetTerm() {
		return nil, fmt.Errorf("cluster: group %d: raft accepted span snapshot %d/%d, which is not the one fetched", r.group, meta.GetIndex(), meta.GetTerm())
	}
	if _, ok := n.groupSpan(r.group); !ok {
		// The group goes with its table (its drop is queued).
		fs.Remove(st.path)
		r.advanceApplied(meta.GetIndex())
		return nil, nil
	}
	rec, err := encodeSpanRecord(r.group, meta)
	if err == nil {
		err = vfs.WriteFileAtomic(fs, n.rangeSnapshotRecord(r.group), rec)
	}
	if err != nil {
		fs.Remove(st.path)
		return nil, fmt.Errorf("cluster: group %d: record the span snapshot: %w", r.group, err)
	}
	return st, nil
}

// ingestSpan writes the staged snapshot into the store s, on the
// ingest's own goroutine, and returns the applied index it set.
func (r *replica) ingestSpan(s *partition.Store, st *stagedSpan) (uint64, error) {
	fs := r.n.dir.fs
	defer fs.Remove(st.path)
	if r.n.beforeSpanIngest != nil {
		r.n.beforeSpanIngest(r.group)
	}
	f, err := fs.Open(st.path)
	if err != nil {
		return 0, fmt.Errorf("cluster: group %d: open span snapshot %d: %w", r.group, st.meta.GetIndex(), err)
	}
	defer f.Close()
	applied, err := s.IngestSpanChecked(r.group, st.span, bufio.NewReaderSize(f, 256<<10), func() error {
		return r.n.mergedOver(s, r.group, st.span)
	})
	if err != nil {
		return 0, fmt.Errorf("cluster: group %d: ingest span snapshot %d: %w", r.group, st.meta.GetIndex(), err)
	}
	return applied, nil
}

// endSpanInstall, on the apply goroutine, finishes an install whose
// ingest set the group's applied index to applied.
func (r *replica) endSpanInstall(st *stagedSpan, applied uint64) error {
	n := r.n
	meta := st.meta
	if applied != meta.GetIndex() {
		return fmt.Errorf("cluster: group %d: span snapshot %d ingested at index %d", r.group, meta.GetIndex(), applied)
	}
	if n.afterSpanIngest != nil {
		n.afterSpanIngest(r.group)
	}
	if err := n.forgetMergedInto(r.group, st.span); err != nil {
		return err
	}
	// A snapshot made past merges names them: what the node still holds
	// of those groups is a leftover, dropped now (dropLeftover checks it
	// on the loop) rather than at noteMerges's next look.
	merged, err := n.st().GroupMerged(r.group)
	if err != nil {
		return err
	}
	for _, g := range merged {
		n.hosts.add(hostChange{group: g, leftover: true})
	}
	if st.ts > r.appliedTS.Load() {
		r.appliedTS.Store(st.ts)
	}
	n.snaps.mu.Lock()
	n.snaps.spanInstalled++ // before the index moves, as installSnapshot's count
	n.snaps.mu.Unlock()
	r.advanceApplied(applied)
	n.log.Info("cluster: span snapshot installed", "node", n.cfg.ID, "group", r.group, "index", applied)
	return nil
}

// errMergedOver ends the span ingest of a group that mergedOver finds
// superseded.
var errMergedOver = errors.New("cluster: the span's keys were merged into a group that holds them here already")

// mergedOver refuses with errMergedOver the ingest of group's span sp
// into store s when the catalog merged the group away (it named the group
// once and names it no more) and a live group of the node (liveHolders)
// holds keys of that span already: a snapshot of the group that took
// them, made past the merge, went in first (a node whose replicas of both
// groups lagged fetches both, and their ingests run in either order), or
// of a group that took them from that one later. The group's snapshot is
// from before its freeze (a frozen group makes none): ingested, its older
// entities would go over the newer ones, and its span record would claim
// keys another group serves. Ingested the other way round, the merged
// group's snapshot replaces it, and forgetMergedInto drops the group.
//
// It runs on the ingest's goroutine, ordered with the store's other
// ingests; the catalog does not change under it, since the system
// group's commands wait for the ingests under way (ingestGate). A store
// that cannot answer lets the ingest go on, as before the check.
func (n *Node) mergedOver(s *partition.Store, group uint64, sp partition.Span) error {
	holders := n.mergedHolders(s, group, sp)
	if len(holders) == 0 {
		return nil
	}
	return fmt.Errorf("%w: group %d, span [%q, %q), group %d", errMergedOver, group, sp.LowPartitionKey, sp.HighPartitionKey, holders[0].Group)
}

// mergedHolders returns, for a group the catalog knew and no longer
// names, the live groups of the node that hold keys of its span sp
// (liveHolders); none for any other group, or when the store cannot
// answer.
func (n *Node) mergedHolders(s *partition.Store, group uint64, sp partition.Span) []partition.GroupSpanOf {
	if !n.catalogKnew(group) {
		return nil // a split's child the catalog does not name yet
	}
	if _, named, err := s.GroupTable(group); named || err != nil {
		return nil
	}
	holders, err := n.liveHolders(s, group, sp)
	if err != nil {
		return nil
	}
	return holders
}

// liveHolders returns the groups other than group whose keys in store s
// overlap span sp and are theirs (partition.Store.SpanHolders): groups
// hosted here, and frozen spans kept for a merge. A record of a group not
// hosted here otherwise holds nothing live (a retired member's).
func (n *Node) liveHolders(s *partition.Store, group uint64, sp partition.Span) ([]partition.GroupSpanOf, error) {
	holders, err := s.SpanHolders(group, sp)
	return slices.DeleteFunc(holders, func(h partition.GroupSpanOf) bool { return !h.Frozen && !n.hostsGroup(h.Group) }), err
}

// superseded says, on the loop, whether group, of span sp, is one
// dropSuperseded drops: merged away, its keys held by a live group of
// the node (mergedOver), and either hosted with no install under way
// (that one decides for itself) or with neither replica nor raft log
// left, its record alone. A group frozen here is kept for the merge of
// the group that takes its keys, which checks for its record: only a
// group hosted here whose own span holds some of its keys (that merge
// made, or a snapshot past it) supersedes it, not another frozen span
// over the same keys (a leftover of a group merged away earlier, not
// dropped yet).
func (n *Node) superseded(group uint64, sp partition.Span) bool {
	// An unloaded replica has no install under way.
	if r := n.replicas[group]; r != nil && r.install != nil || r == nil && !n.hostsGroup(group) && !n.logEmpty(group) {
		return false
	}
	s := n.st()
	holders := n.mergedHolders(s, group, sp)
	frozen, err := s.GroupFrozen(group)
	return err == nil && slices.ContainsFunc(holders, func(h partition.GroupSpanOf) bool { return !frozen || !h.Frozen })
}

// dropMergedOver, on the loop, drops replica r, whose span snapshot
// mergedOver refused, unless it is gone already.
func (n *Node) dropMergedOver(r *replica) error {
	if n.group(r.group) != r || r.install == nil {
		return nil // dropped already
	}
	return n.dropSuperseded(r.group)
}

// dropSuperseded drops, on the loop, this node's replica of group, which
// the catalog merged away and whose keys a live group of the node holds
// (mergedOver), if it hosts one: its replica and raft log go, as merged,
// and then its span record, keeping every entity. In that order, a crash
// between the two leaves a record with no replica or log, which
// noteMerges finds and this drops again; the other order left a raft log
// nothing would delete.
func (n *Node) dropSuperseded(group uint64) error {
	if err := n.mergedAway(group); err != nil {
		return err
	}
	if err := n.onApply(func() error { return n.st().ForgetGroup(group) }); err != nil {
		return err
	}
	n.log.Info("cluster: range group merged away and held by another dropped", "node", n.cfg.ID, "group", group)
	return nil
}
