package cluster

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/cluster/raftlog"
	"github.com/tabuladb/tabula/partition"
)

// Snapshots catch up a replica that needs entries its peers' logs no
// longer hold (a long-stopped node, a new one). raft carries only a small
// descriptor in its MsgSnap (the leader and a token); the follower fetches
// the store itself from the leader out of band (FetchSnapshot), restores
// it into a new store directory beside its live one, and only then lets
// raft see the message, so a failed fetch costs a retry, never a Ready
// the node cannot honour. When raft then hands the snapshot back in a
// Ready, the node switches to the staged store (storedir.go) and records
// the snapshot in its raft log.

// snapshotReuse is how long a leader hands out the same snapshot.
const snapshotReuse = time.Minute

// snapshotIdle is how long a follower's fetch of a snapshot may go
// without a byte arriving before it gives up. A large store takes as long
// as it takes to move; a stalled transfer is cut.
const snapshotIdle = time.Minute

// servedSnapshot is a snapshot a leader made, pinned while followers
// stream it and until Config.SnapshotKeep after its last use.
type servedSnapshot struct {
	token []byte
	group uint64       // the group it catches up
	ss    snapshotView // the store's, or a range group's span
	meta  *raftpb.SnapshotMetadata
	ts    int64 // the newest commit timestamp applied at its index
	made  time.Time
	// Under snapshots.mu: streams in progress, and when it was last
	// handed out or streamed.
	streams int
	used    time.Time
}

// snapshotView is a pinned view a leader streams to a follower.
type snapshotView interface {
	WriteTo(io.Writer) (int64, error)
	Close() error
}

// stagedSnapshot is a snapshot a follower fetched and restored, waiting
// for raft to hand it back.
type stagedSnapshot struct {
	meta    *raftpb.SnapshotMetadata
	ptr     storePointer
	store   *partition.Store
	ts      int64
	members memberBook // the leader's member book when it served the snapshot
}

// snapshots is a node's snapshot state, on both sides.
type snapshots struct {
	mu       sync.Mutex
	served   map[string]*servedSnapshot // by token
	latest   *servedSnapshot
	staged   *stagedSnapshot
	fetching bool
	nextDir  int           // the number of the last store directory made
	closed   bool          // the node stopped: stage nothing more
	keep     time.Duration // Config.SnapshotKeep

	// Counts, for Status: store snapshots (the system group's) made and
	// installed, and span snapshots (range groups').
	made, installed         int
	spanMade, spanInstalled int
}

// groupStorage is the raft.Storage a replica gives raft: its group's log,
// with snapshots once the log is compacted, which take the data whose
// log is gone: the whole store for the system group
// (Node.leaderSnapshot), the table's span for a range group
// (replica.leaderSpanSnapshot, range_snapshot.go).
type groupStorage struct {
	*raftlog.Storage
	// snapshot returns one whose index is at least first-1; set once the
	// replica exists.
	snapshot func(first uint64) (*raftpb.Snapshot, error)
}

// Snapshot implements raft.Storage: the log's own (empty) snapshot while
// nothing was compacted, else one of the group's data. raft asks for one
// only to send it to a follower that needs compacted entries; it runs on
// the loop.
func (s *groupStorage) Snapshot() (*raftpb.Snapshot, error) {
	first, err := s.Storage.FirstIndex()
	if err != nil {
		return nil, err
	}
	if first <= 1 {
		return s.Storage.Snapshot()
	}
	return s.snapshot(first)
}

// snapshotData is what a MsgSnap carries: the node that made the
// snapshot and the token to fetch it by.
func snapshotData(from uint64, token []byte) []byte {
	return append(binary.BigEndian.AppendUint64(nil, from), token...)
}

func parseSnapshotData(b []byte) (from uint64, token []byte, err error) {
	if len(b) != 8+16 {
		return 0, nil, fmt.Errorf("cluster: a snapshot descriptor of %d bytes", len(b))
	}
	return binary.BigEndian.Uint64(b), b[8:], nil
}

// leaderSnapshot returns a snapshot whose index is at least first-1 (so
// the log continues it), reusing a recent one. It runs on the loop
// goroutine and takes a new one from the apply goroutine, between two
// commands, so the store view and its index agree.
func (n *Node) leaderSnapshot(first uint64) (*raftpb.Snapshot, error) {
	n.snaps.mu.Lock()
	l := n.snaps.latest
	if l != nil {
		l.used = time.Now()
	}
	n.snaps.mu.Unlock()
	if l == nil || l.meta.GetIndex()+1 < first || time.Since(l.made) > snapshotReuse {
		if err := n.onApply(func() (err error) {
			l, err = n.takeSnapshot()
			return err
		}); err != nil {
			return nil, err
		}
		if l.meta.GetIndex()+1 < first {
			// Nothing applied past the compaction yet: raft retries.
			return nil, raft.ErrSnapshotTemporarilyUnavailable
		}
	}
	return &raftpb.Snapshot{Data: snapshotData(n.cfg.ID, l.token), Metadata: proto.Clone(l.meta).(*raftpb.SnapshotMetadata)}, nil
}

// takeSnapshot pins a view of the store at the applied index. It runs on
// the apply goroutine.
func (n *Node) takeSnapshot() (*servedSnapshot, error) {
	idx := n.applied.Load()
	term, err := n.rlog.Term(idx)
	if err != nil {
		return nil, err
	}
	_, cs, err := n.rlog.InitialState()
	if err != nil {
		return nil, err
	}
	token := make([]byte, 16)
	rand.Read(token)
	now := time.Now()
	s := &servedSnapshot{token: token, group: systemGroup, ss: n.st().Snapshot(), ts: n.appliedTS.Load(), made: now, used: now,
		meta: &raftpb.SnapshotMetadata{Index: &idx, Term: &term, ConfState: proto.Clone(cs).(*raftpb.ConfState)}}
	n.snaps.add(s)
	n.snaps.mu.Lock()
	n.snaps.latest = s
	n.snaps.made++
	n.snaps.mu.Unlock()
	n.log.Info("cluster: snapshot made for a lagging follower", "node", n.cfg.ID, "index", idx, "term", term)
	return s, nil
}

// add registers a snapshot made to be served, and releases those unused
// for longer than the node keeps them.
func (ss *snapshots) add(s *servedSnapshot) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for k, old := range ss.served {
		// One a follower is still reading stays, however long the store
		// takes to move.
		if old.streams == 0 && s.made.Sub(old.used) > ss.keep {
			old.ss.Close()
			delete(ss.served, k)
		}
	}
	ss.served[string(s.token)] = s
}

// release lets go of the snapshots made for group (dropped with its
// table) that no follower is reading; one being read goes when it is
// next found unused.
func (ss *snapshots) release(group uint64) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for k, s := range ss.served {
		if s.group == group && s.streams == 0 {
			s.ss.Close()
			delete(ss.served, k)
		}
	}
}

// snapshotMagic opens a served snapshot: a header (the snapshot's index,
// term and newest commit timestamp, big-endian) before the store stream
// (docs/snapshot.md).
var snapshotMagic = []byte("TBLCSNP\x01")

// ServeSnapshot writes the snapshot token names (one this node made as a
// leader) to w.
func (n *Node) ServeSnapshot(w io.Writer, token []byte) error {
	n.snaps.mu.Lock()
	s := n.snaps.served[string(token)]
	if s != nil {
		s.streams++
		s.used = time.Now()
	}
	n.snaps.mu.Unlock()
	if s == nil {
		return errors.New("cluster: no such snapshot (expired, or made by an earlier run)")
	}
	defer func() {
		n.snaps.mu.Lock()
		s.streams--
		s.used = time.Now()
		if n.snaps.closed && s.streams == 0 {
			s.ss.Close() // the node stopped while this stream ran: the last stream closes it
		}
		n.snaps.mu.Unlock()
	}()
	hdr := append([]byte(nil), snapshotMagic...)
	hdr = binary.BigEndian.AppendUint64(hdr, s.meta.GetIndex())
	hdr = binary.BigEndian.AppendUint64(hdr, s.meta.GetTerm())
	hdr = binary.BigEndian.AppendUint64(hdr, uint64(s.ts))
	book := encodeMembers(n.members.clone())
	hdr = binary.BigEndian.AppendUint32(hdr, uint32(len(book)))
	hdr = append(hdr, book...)
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	_, err := s.ss.WriteTo(w)
	return err
}

// closeSnapshots releases every pinned snapshot (the node is stopping); one
// being streamed is released when its stream ends.
func (n *Node) closeSnapshots() {
	n.snaps.mu.Lock()
	defer n.snaps.mu.Unlock()
	n.snaps.closed = true
	for k, s := range n.snaps.served {
		if s.streams == 0 { // else its last stream closes it (ServeSnapshot)
			s.ss.Close()
		}
		delete(n.snaps.served, k)
	}
	n.snaps.latest = nil
	if st := n.snaps.staged; st != nil {
		st.store.Close()
		n.snaps.staged = nil
	}
}

// snapshotMessage handles a MsgSnap on the follower: it is stepped into
// raft only once its snapshot is staged; until then it starts (once) the
// fetch and is dropped: the leader sends it again.
func (n *Node) snapshotMessage(m *raftpb.Message) bool {
	meta := m.GetSnapshot().GetMetadata()
	n.snaps.mu.Lock()
	defer n.snaps.mu.Unlock()
	if st := n.snaps.staged; st != nil && st.meta.GetIndex() == meta.GetIndex() && st.meta.GetTerm() == meta.GetTerm() {
		return true
	}
	if n.snaps.fetching || n.cfg.FetchSnapshot == nil {
		return false
	}
	n.snaps.fetching = true
	msg := proto.Clone(m).(*raftpb.Message)
	go n.fetchSnapshot(msg)
	return false
}

// fetchSnapshot fetches and stages a snapshot, then hands its message
// back to the loop.
func (n *Node) fetchSnapshot(m *raftpb.Message) {
	err := n.stage(m)
	n.snaps.mu.Lock()
	n.snaps.fetching = false
	n.snaps.mu.Unlock()
	if err != nil {
		n.log.Warn("cluster: fetching a snapshot failed; the leader will offer another", "node", n.cfg.ID, "err", err)
		return
	}
	n.deliver(systemGroup, []*raftpb.Message{m})
}

// snapshotStream is a snapshot being fetched: its header read, its body
// (the store's or a span's stream) to read from br.
type snapshotStream struct {
	from  uint64
	hdr   snapshotHeader
	br    *bufio.Reader
	close func()
}

// fetchSnapshotStream starts fetching the snapshot m describes from the
// node that made it and reads its header. The transfer is cut when the
// node stops or no byte comes for snapshotIdle; the caller closes it.
func (n *Node) fetchSnapshotStream(m *raftpb.Message) (*snapshotStream, error) {
	from, token, err := parseSnapshotData(m.GetSnapshot().GetData())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-n.stopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	rc, err := n.cfg.FetchSnapshot(ctx, from, token)
	if err != nil {
		cancel()
		return nil, err
	}
	ss := &snapshotStream{from: from, br: bufio.NewReader(newIdleReader(rc, snapshotIdle, cancel)),
		close: func() { rc.Close(); cancel() }}
	if ss.hdr, err = readSnapshotHeader(ss.br, from, m.GetSnapshot().GetMetadata()); err != nil {
		ss.close()
		return nil, err
	}
	return ss, nil
}

func (n *Node) stage(m *raftpb.Message) error {
	meta := m.GetSnapshot().GetMetadata()
	ss, err := n.fetchSnapshotStream(m)
	if err != nil {
		return err
	}
	defer ss.close()
	from, hdr, br := ss.from, ss.hdr, ss.br
	idx := meta.GetIndex()
	n.snaps.mu.Lock()
	n.snaps.nextDir++
	ptr := storePointer{n: n.snaps.nextDir, snap: meta}
	n.snaps.mu.Unlock()
	dir := ptr.dir(n.dir.dir)
	if err := partition.RemoveStore(n.dir.fs, dir); err != nil {
		return err
	}
	store, err := partition.RestoreSnapshot(dir, &n.dir.opts, br)
	if err != nil {
		return fmt.Errorf("cluster: restore the snapshot from node %d: %w", from, err)
	}
	// The leader's store may have applied refusals after its last write:
	// the restored store is at the snapshot's index all the same.
	if err := store.SyncApplied(systemGroup, idx); err != nil {
		store.Close()
		return err
	}
	n.snaps.mu.Lock()
	if n.snaps.closed {
		n.snaps.mu.Unlock()
		store.Close()
		return ErrStopped
	}
	if old := n.snaps.staged; old != nil {
		old.store.Close()
		partition.RemoveStore(n.dir.fs, old.ptr.dir(n.dir.dir))
	}
	n.snaps.staged = &stagedSnapshot{meta: meta, ptr: ptr, store: store, ts: hdr.ts, members: hdr.book}
	n.snaps.mu.Unlock()
	n.log.Info("cluster: snapshot fetched and staged", "node", n.cfg.ID, "from", from, "index", idx)
	return nil
}

// snapshotHeader is what precedes a served snapshot's stream.
type snapshotHeader struct {
	ts   int64      // the newest commit timestamp applied at its index
	book memberBook // the leader's member book when it served it
}

// readSnapshotHeader reads a served snapshot's header (ServeSnapshot) and
// checks that it is of the snapshot raft's message names.
func readSnapshotHeader(br *bufio.Reader, from uint64, meta *raftpb.SnapshotMetadata) (snapshotHeader, error) {
	var hdr [8 + 24]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil || string(hdr[:8]) != string(snapshotMagic) {
		return snapshotHeader{}, fmt.Errorf("cluster: snapshot from node %d: bad header", from)
	}
	idx, term := binary.BigEndian.Uint64(hdr[8:]), binary.BigEndian.Uint64(hdr[16:])
	if idx != meta.GetIndex() || term != meta.GetTerm() {
		return snapshotHeader{}, fmt.Errorf("cluster: snapshot from node %d is at %d/%d, not %d/%d", from, idx, term, meta.GetIndex(), meta.GetTerm())
	}
	var bookLen [4]byte
	if _, err := io.ReadFull(br, bookLen[:]); err != nil || binary.BigEndian.Uint32(bookLen[:]) > 1<<20 {
		return snapshotHeader{}, fmt.Errorf("cluster: snapshot from node %d: bad member list", from)
	}
	rawBook := make([]byte, binary.BigEndian.Uint32(bookLen[:]))
	if _, err := io.ReadFull(br, rawBook); err != nil {
		return snapshotHeader{}, fmt.Errorf("cluster: snapshot from node %d: cut member list", from)
	}
	book, err := decodeMembers(rawBook)
	if err != nil {
		return snapshotHeader{}, err
	}
	return snapshotHeader{ts: int64(binary.BigEndian.Uint64(hdr[24:])), book: book}, nil
}

// installSnapshot switches to the staged store raft has accepted. It runs
// on the apply goroutine, between commands.
func (n *Node) installSnapshot(meta *raftpb.SnapshotMetadata) error {
	n.snaps.mu.Lock()
	st := n.snaps.staged
	n.snaps.staged = nil
	n.snaps.mu.Unlock()
	if st == nil || st.meta.GetIndex() != meta.GetIndex() || st.meta.GetTerm() != meta.GetTerm() {
		return fmt.Errorf("cluster: raft accepted snapshot %d/%d, which is not the one staged", meta.GetIndex(), meta.GetTerm())
	}
	changes, err := n.carryRangeGroups(n.st(), st.store)
	if err != nil {
		st.store.Close()
		return err
	}
	// The address book first: the members it names may include the
	// leader, and a crash after the switch below must not leave this node
	// with the snapshot's store but not the addresses to answer it at.
	if err := n.mergeMembers(st.members, meta.GetIndex()); err != nil {
		st.store.Close()
		return err
	}
	if err := n.dir.writePointer(st.ptr); err != nil {
		st.store.Close()
		return err
	}
	old, oldPtr := n.st(), n.storePtr
	n.store.Store(st.store)
	n.storePtr = st.ptr
	if err := old.Close(); err != nil {
		n.log.Warn("cluster: closing the replaced store", "err", err)
	}
	if err := partition.RemoveStore(n.dir.fs, oldPtr.dir(n.dir.dir)); err != nil {
		n.log.Warn("cluster: removing the replaced store", "err", err)
	}
	if st.ts > n.appliedTS.Load() {
		n.appliedTS.Store(st.ts)
	}
	// Counted before the index moves: whoever sees the node applied past
	// the snapshot sees it installed (the tests wait on the index).
	n.snaps.mu.Lock()
	n.snaps.installed++
	n.snaps.mu.Unlock()
	n.advanceApplied(meta.GetIndex())
	for _, c := range changes {
		n.hosts.add(c)
	}
	n.log.Info("cluster: snapshot installed", "node", n.cfg.ID, "index", meta.GetIndex())
	return nil
}

// snapshotUnrecorded reports whether the store was switched to a snapshot
// at applied that the raft log has not recorded: the node crashed between
// the switch (installSnapshot) and the log's write. The log may then hold
// entries up to and past the snapshot's index, of a tail the group never
// committed: raft hands a snapshot to install only when the log does not
// hold the snapshot's entry. Recording the snapshot drops that tail, as
// the lost write would have. Kept, it would contradict the snapshot's
// entry, which the node's hard state then says is committed: the node
// would refuse the leader's appends until a newer snapshot came.
func snapshotUnrecorded(st *raftlog.Storage, ptr storePointer, applied uint64) bool {
	if ptr.snap == nil || ptr.snap.GetIndex() != applied {
		return false
	}
	first, err := st.FirstIndex()
	return err == nil && first <= applied
}

// idleReader cancels a transfer when no byte has come for idle: a slow
// transfer of a large store goes on, a stalled one ends.
type idleReader struct {
	r     io.Reader
	idle  time.Duration
	timer *time.Timer
}

func newIdleReader(r io.Reader, idle time.Duration, cancel func()) *idleReader {
	return &idleReader{r: r, idle: idle, timer: time.AfterFunc(idle, cancel)}
}

func (ir *idleReader) Read(p []byte) (int, error) {
	n, err := ir.r.Read(p)
	if n > 0 {
		ir.timer.Reset(ir.idle)
	}
	return n, err
}
