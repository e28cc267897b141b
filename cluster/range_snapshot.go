package cluster

import (
	"bufio"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/vfs"
)

// Range snapshots catch up a range group's replica that needs entries
// its peers' logs no longer hold, from its table's span alone (a span
// snapshot, docs/snapshot.md), as the system group's snapshots do from
// the whole store (snapshot.go). The leader pins a view of the span with
// the group's applied index; the follower fetches it out of band into a
// file beside its store, checks it, and only then lets raft see the
// message. When raft hands the snapshot back in a Ready, the file is
// ingested into the store (which sets the group's applied index with the
// data; span_install.go) and the loop records the snapshot in the
// group's log. A crash between the two is repaired at the next start
// from a record of the snapshot written before the ingest
// (recordedRangeSnapshot).

// spanSnapshots is a range replica's snapshot state: the last one it
// made as the leader (loop-owned), and those it fetched as a follower, by
// index. A newer fetch does not replace an older one: raft may have
// accepted the older one, whose install is then under way.
type spanSnapshots struct {
	latest *servedSnapshot

	mu       sync.Mutex
	staged   map[uint64]*stagedSpan
	fetching bool
}

// removeStaged forgets the fetched snapshots at or below index and
// deletes their files. The caller holds mu.
func (s *spanSnapshots) removeStaged(fs vfs.FS, index uint64) {
	for i, st := range s.staged {
		if i <= index {
			fs.Remove(st.path)
			delete(s.staged, i)
		}
	}
}

// stagedSpan is a span snapshot a follower fetched and checked, in a
// file, waiting for raft to hand it back.
type stagedSpan struct {
	meta *raftpb.SnapshotMetadata
	path string
	ts   int64
	span partition.Span // as the stream has it: the leader's
}

// groupSpan returns the span a range group replicates, as its log here
// has set it: its table, or the part of it its splits left it.
func (n *Node) groupSpan(group uint64) (partition.Span, bool) {
	sp, ok, err := n.st().GroupSpan(group)
	return sp, ok && err == nil
}

// leaderSpanSnapshot returns a snapshot of the group's span whose index
// is at least first-1 (so the log continues it), reusing a recent one.
// The view and the group's applied index it holds agree (SnapshotSpan),
// so it needs no pause of the apply goroutine.
func (r *replica) leaderSpanSnapshot(first uint64) (*raftpb.Snapshot, error) {
	n := r.n
	// A snapshot older than the group's last configuration change would
	// not name the members it added, which raft makes refuse it; one at
	// or past it carries the configuration in force now.
	confIndex := r.confIndex
	l := r.spans.latest
	if l == nil || l.meta.GetIndex()+1 < first || l.meta.GetIndex() < confIndex || time.Since(l.made) > snapshotReuse {
		recorded, err := n.st().SpanRecorded(r.group)
		if err != nil {
			return nil, err
		}
		sp, ok := n.groupSpan(r.group)
		if frozen, err := n.st().GroupFrozen(r.group); !ok || err != nil || frozen {
			// Its table is being dropped; or it is frozen, to be merged:
			// a snapshot would carry its data without the freeze.
			return nil, raft.ErrSnapshotTemporarilyUnavailable
		}
		ss, err := n.st().SnapshotGroupSpan(r.group, sp, recorded)
		if errors.Is(err, partition.ErrSpanChanged) {
			return nil, raft.ErrSnapshotTemporarilyUnavailable // read the span again
		}
		if err != nil {
			return nil, err
		}
		idx := ss.AppliedIndex()
		if idx+1 < first || idx < confIndex {
			// The store's view is behind the compaction (a write of the
			// group still on its way to the engine), or behind the last
			// configuration change: raft retries.
			ss.Close()
			return nil, raft.ErrSnapshotTemporarilyUnavailable
		}
		term, err := r.rlog.Term(idx)
		if err != nil {
			ss.Close()
			return nil, err
		}
		token := make([]byte, 16)
		rand.Read(token)
		now := time.Now()
		l = &servedSnapshot{token: token, group: r.group, ss: ss, ts: r.appliedTS.Load(), made: now, used: now,
			meta: &raftpb.SnapshotMetadata{Index: &idx, Term: &term, ConfState: proto.Clone(r.conf).(*raftpb.ConfState)}}
		n.snaps.add(l)
		n.snaps.mu.Lock()
		n.snaps.spanMade++
		n.snaps.mu.Unlock()
		r.spans.latest = l
		n.log.Info("cluster: span snapshot made for a lagging follower", "node", n.cfg.ID, "group", r.group, "index", idx, "term", term)
	}
	n.snaps.mu.Lock()
	l.used = time.Now()
	n.snaps.mu.Unlock()
	return &raftpb.Snapshot{Data: snapshotData(n.cfg.ID, l.token), Metadata: proto.Clone(l.meta).(*raftpb.SnapshotMetadata)}, nil
}

// spanSnapshotMessage handles a range group's MsgSnap on the follower, as
// snapshotMessage does the system group's: stepped once its snapshot is
// fetched and checked; until then it starts the fetch (once) and is
// dropped, for the leader to send again.
func (r *replica) spanSnapshotMessage(m *raftpb.Message) bool {
	meta := m.GetSnapshot().GetMetadata()
	if meta.GetIndex() <= r.applied.Load() {
		// Already applied (a message sent again while the last one was
		// installed): raft answers it with where the replica is.
		return true
	}
	if r.install != nil {
		// One is being installed (a message sent again meanwhile): the
		// leader offers again once it is, if it still must.
		return false
	}
	r.spans.mu.Lock()
	defer r.spans.mu.Unlock()
	if st := r.spans.staged[meta.GetIndex()]; st != nil && st.meta.GetTerm() == meta.GetTerm() {
		return true
	}
	if r.spans.fetching || r.n.cfg.FetchSnapshot == nil {
		return false
	}
	r.spans.fetching = true
	msg := proto.Clone(m).(*raftpb.Message)
	go func() {
		err := r.fetchSpan(msg)
		r.spans.mu.Lock()
		r.spans.fetching = false
		r.spans.mu.Unlock()
		if err != nil {
			r.n.log.Warn("cluster: fetching a span snapshot failed; the leader will offer another", "node", r.n.cfg.ID, "group", r.group, "err", err)
			return
		}
		r.n.deliver(r.group, []*raftpb.Message{msg})
	}()
	return false
}

// spanFile is where a follower keeps a fetched span snapshot of group at
// index until it ingests it: a name of its own for every fetch, so that a
// fetch never writes over a file another one staged.
func (n *Node) spanFile(group, index uint64) string {
	name := fmt.Sprintf("span-%d-%d-%d%s", group, index, n.spanFiles.Add(1), spanFileSuffix)
	return filepath.Join(n.dir.dir, name)
}

const spanFileSuffix = ".snap"

// removeSpanFiles deletes the span snapshots fetched by an earlier run:
// what a follower fetched and did not install is fetched again if raft
// still wants it.
func removeSpanFiles(fs vfs.FS, dir string) error {
	names, err := fs.List(dir)
	if err != nil {
		return err
	}
	for _, name := range names {
		if strings.HasPrefix(name, "span-") && strings.HasSuffix(name, spanFileSuffix) {
			if err := fs.Remove(filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// fetchSpan fetches a span snapshot into its file and checks it.
func (r *replica) fetchSpan(m *raftpb.Message) error {
	n := r.n
	meta := m.GetSnapshot().GetMetadata()
	sp, ok := n.groupSpan(r.group)
	if !ok {
		return errors.New("the group's table is gone")
	}
	ss, err := n.fetchSnapshotStream(m)
	if err != nil {
		return err
	}
	defer ss.close()
	path := n.spanFile(r.group, meta.GetIndex())
	fs := n.dir.fs
	f, err := fs.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, ss.br)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	var streamed partition.Span
	if err == nil {
		streamed, err = checkSpanFile(fs, path, r.group, sp, meta.GetIndex())
	}
	if err != nil {
		fs.Remove(path)
		return fmt.Errorf("span snapshot of group %d from node %d: %w", r.group, ss.from, err)
	}
	r.spans.mu.Lock()
	defer r.spans.mu.Unlock()
	if r.spans.staged == nil {
		r.spans.staged = map[uint64]*stagedSpan{}
	}
	r.spans.staged[meta.GetIndex()] = &stagedSpan{meta: meta, path: path, ts: ss.hdr.ts, span: streamed}
	n.log.Info("cluster: span snapshot fetched", "node", n.cfg.ID, "group", r.group, "from", ss.from, "index", meta.GetIndex())
	return nil
}

// checkSpanFile checks a fetched span snapshot of the table of sp, and
// that it holds the index raft's message names, and returns the span it
// holds: the leader's, which the group's log may have split since this
// replica's own.
func checkSpanFile(fs vfs.FS, path string, group uint64, sp partition.Span, index uint64) (partition.Span, error) {
	f, err := fs.Open(path)
	if err != nil {
		return partition.Span{}, err
	}
	defer f.Close()
	streamed, applied, err := partition.CheckSpanSnapshotOf(group, sp.Account, sp.Table, bufio.NewReaderSize(f, 256<<10))
	if err == nil && applied != index {
		err = fmt.Errorf("the stream holds index %d, the message %d", applied, index)
	}
	return streamed, err
}

// rangeSnapshotRecord names the file recording the last span snapshot a
// follower installed in group (docs/cluster-files.md).
func (n *Node) rangeSnapshotRecord(group uint64) string {
	return filepath.Join(n.dir.dir, "SPANSNAP-"+strconv.FormatUint(group, 10))
}

// recordedRangeSnapshot returns the span snapshot of group the node
// installed in its store at index applied, if its record says so: the
// store holds it whatever the raft log recorded.
func (n *Node) recordedRangeSnapshot(group, applied uint64) *raftpb.SnapshotMetadata {
	b, err := vfs.ReadFile(n.dir.fs, n.rangeSnapshotRecord(group), 64<<10)
	if err != nil {
		return nil
	}
	g, meta, err := decodeSpanRecord(b)
	if err != nil {
		n.log.Warn("cluster: a span snapshot record is damaged; ignored", "group", group, "err", err)
		return nil
	}
	if g != group || meta.GetIndex() != applied {
		return nil
	}
	return meta
}

// encodeSpanRecord writes a span snapshot record: a header line, the
// group, and the snapshot line.
func encodeSpanRecord(group uint64, meta *raftpb.SnapshotMetadata) ([]byte, error) {
	line, err := snapshotLine(meta)
	if err != nil {
		return nil, err
	}
	return fmt.Appendf(nil, "tabula-span-snapshot 1\ngroup %d\n%s\n", group, line), nil
}

func decodeSpanRecord(b []byte) (uint64, *raftpb.SnapshotMetadata, error) {
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 3 || lines[0] != "tabula-span-snapshot 1" {
		return 0, nil, errors.New("no header, or not three lines")
	}
	var group uint64
	if _, err := fmt.Sscanf(lines[1], "group %d", &group); err != nil || group <= systemGroup || lines[1] != "group "+strconv.FormatUint(group, 10) {
		return 0, nil, errors.New("bad group line")
	}
	meta, err := parseSnapshotLine(lines[2])
	return group, meta, err
}
