package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/cluster/raftlog"
	"github.com/tabuladb/tabula/cluster/transport"
	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/vfs"
)

// simNet is an in-memory network between the nodes of a test cluster:
// messages arrive after a random delay, may be dropped, and links may be
// cut; the choices come from one seeded generator.
type simNet struct {
	mu       sync.Mutex
	rng      *rand.Rand
	nodes    map[uint64]*Node
	cut      map[[2]uint64]bool // directed links that deliver nothing
	dead     map[uint64]bool    // nodes that lost power: they send nothing more
	dropRate float64
	maxDelay time.Duration
	closed   bool
	wg       sync.WaitGroup
	held     map[uint64]chan struct{} // nodes whose sends wait (hold)
	deaf     map[[2]uint64]bool       // (node, group): the group's messages to and from the node are lost
	// Nodes that hear no range group's messages (deafenRanges) but
	// those of the groups they were let hear again (hear).
	deafRanges map[uint64]bool
	heard      map[[2]uint64]bool
	// observe, when set, sees every message sent, before any is lost.
	observe func(from uint64, m transport.Message)
}

func newSimNet(seed uint64) *simNet {
	return &simNet{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), nodes: map[uint64]*Node{},
		cut: map[[2]uint64]bool{}, dead: map[uint64]bool{}}
}

// simTransport is one node's end of the network.
type simTransport struct {
	net  *simNet
	from uint64
}

func (t simTransport) Send(msgs []transport.Message) {
	s := t.net
	s.mu.Lock()
	h := s.held[t.from]
	s.mu.Unlock()
	if h != nil {
		<-h
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.dead[t.from] {
		return
	}
	for _, m := range msgs {
		if s.observe != nil {
			s.observe(t.from, m)
		}
		to := transport.NodeOf(m.Raft.GetTo())
		if s.cut[[2]uint64{t.from, to}] || s.isDeaf(t.from, m.Group) || s.isDeaf(to, m.Group) ||
			(s.dropRate > 0 && s.rng.Float64() < s.dropRate) {
			continue
		}
		n := s.nodes[to]
		if n == nil {
			continue
		}
		var d time.Duration
		if s.maxDelay > 0 {
			d = time.Duration(s.rng.Int64N(int64(s.maxDelay)))
		}
		// The receiver must not share the sender's message: each side's
		// raft keeps what it is given.
		c := transport.Message{Group: m.Group, Raft: proto.Clone(m.Raft).(*raftpb.Message)}
		s.wg.Add(1)
		time.AfterFunc(d, func() {
			defer s.wg.Done()
			n.Receive([]transport.Message{c})
		})
	}
}

// Unreachable reports nothing: the simulated network drops messages
// silently, as a lossy link does, and raft finds out by their absence.
func (t simTransport) Unreachable() []uint64 { return nil }

// fetchSnapshot fetches a snapshot from a node of the network, as the
// HTTP transport does between processes.
func (s *simNet) fetchSnapshot(ctx context.Context, from uint64, token []byte) (io.ReadCloser, error) {
	s.mu.Lock()
	n := s.nodes[from]
	s.mu.Unlock()
	if n == nil {
		return nil, fmt.Errorf("node %d is down", from)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(n.ServeSnapshot(pw, token)) }()
	return pr, nil
}

// rangeStats yields the ranges every node of the network reports, each
// from its leaseholder, as the HTTP transport does between processes.
func (s *simNet) rangeStats(ctx context.Context) iter.Seq[RangeStatus] {
	return func(yield func(RangeStatus) bool) {
		s.mu.Lock()
		nodes := make([]*Node, 0, len(s.nodes))
		for _, n := range s.nodes {
			nodes = append(nodes, n)
		}
		s.mu.Unlock()
		for _, n := range nodes {
			for rs := range n.eachRange(ctx) {
				if !yield(rs) {
					return
				}
			}
		}
	}
}

// partition cuts every link between the two sides.
func (s *simNet) partition(a, b []uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range a {
		for _, y := range b {
			s.cut[[2]uint64{x, y}], s.cut[[2]uint64{y, x}] = true, true
		}
	}
}

// setFaults sets the chance of dropping a message and the longest delay.
func (s *simNet) setFaults(dropRate float64, maxDelay time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropRate, s.maxDelay = dropRate, maxDelay
}

// hold makes node id's next sends wait until release is called: its loop
// stops in the middle of a Ready, as a stalled disk or scheduler stops it,
// while messages and proposals queue up for it.
func (s *simNet) hold(id uint64) (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		s.held = map[uint64]chan struct{}{}
	}
	ch := make(chan struct{})
	s.held[id] = ch
	return func() {
		s.mu.Lock()
		delete(s.held, id)
		s.mu.Unlock()
		close(ch)
	}
}

// deafen loses every message of range group group to or from node id:
// the node's member neither hears nor answers, as on a node that does
// not host it, while the node's other groups go on.
func (s *simNet) deafen(id, group uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deaf == nil {
		s.deaf = map[[2]uint64]bool{}
	}
	s.deaf[[2]uint64{id, group}] = true
}

// deafenRanges loses every message of every range group to or from node
// id, the system group's excepted, and of groups created later too, until
// hear lets one through again.
func (s *simNet) deafenRanges(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deafRanges == nil {
		s.deafRanges, s.heard = map[uint64]bool{}, map[[2]uint64]bool{}
	}
	s.deafRanges[id] = true
}

// hear lets the messages of range group group to and from node id, which
// deafen or deafenRanges deafened, through again.
func (s *simNet) hear(id, group uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.deaf, [2]uint64{id, group})
	if s.heard != nil {
		s.heard[[2]uint64{id, group}] = true
	}
}

// isDeaf says whether node id loses the messages of group; s.mu is held.
func (s *simNet) isDeaf(id, group uint64) bool {
	return s.deaf[[2]uint64{id, group}] ||
		s.deafRanges[id] && group != systemGroup && !s.heard[[2]uint64{id, group}]
}

func (s *simNet) heal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.cut)
}

func (s *simNet) setNode(id uint64, n *Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n == nil {
		delete(s.nodes, id)
	} else {
		s.nodes[id] = n
		delete(s.dead, id)
	}
}

// kill silences node id at once, as a power loss does: nothing it does
// after this moment reaches anyone.
func (s *simNet) kill(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dead[id] = true
	delete(s.nodes, id)
}

func (s *simNet) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wg.Wait()
}

// testNode is one node of a test cluster with its own in-memory disk.
type testNode struct {
	id     uint64
	fs     *vfs.MemFS
	store  *partition.Store
	rlog   *raftlog.Log
	node   *Node
	cancel context.CancelFunc
	done   chan error
	paused atomic.Bool // its raft clock stands still
}

// logGroup returns the node's raft log state of group id.
func (tn *testNode) logGroup(id uint64) *raftlog.Storage {
	s, err := tn.rlog.Group(id)
	if err != nil {
		panic(err)
	}
	return s
}

// testCluster runs nodes in one process over a simNet.
type testCluster struct {
	t     testing.TB
	net   *simNet
	peers []uint64
	nodes map[uint64]*testNode
	// clock is the wall clock of the nodes started next (nil: time.Now);
	// snapshotKeep their Config.SnapshotKeep (0: the default).
	clock        func() time.Time
	snapshotKeep time.Duration
	// groups are the range groups every node hosts, their voters the
	// founding nodes. tick is the nodes' raft tick (0: 10 ms).
	groups []uint64
	tick   time.Duration
	// rangeGroups is the nodes' Config.RangeGroups: tables get groups.
	rangeGroups bool
	// members is the nodes' Config.Members: none by default.
	members map[uint64]string
	// prepare, when set, is called on each node started, before it runs.
	prepare func(*testNode)
	// placementInterval and deadAfter are the nodes' Config's (0: the
	// defaults); splitBytes their stores' Options.SplitBytes.
	placementInterval, deadAfter time.Duration
	// mergeAfter is the nodes' Config.MergeAfter (0: the default).
	mergeAfter time.Duration
	splitBytes int64
	// tableCache is the stores' Options.TableCacheSize (0: 3).
	tableCache int
	// settle makes convergence wait for late commits (stable): for runs
	// whose clients gave up on writes that may still commit.
	settle bool
}

func newTestCluster(t testing.TB, size int, seed uint64) *testCluster {
	t.Helper()
	return newRangeCluster(t, size, seed, 0)
}

func (c *testCluster) tickInterval() time.Duration {
	if c.tick > 0 {
		return c.tick
	}
	return 10 * time.Millisecond
}

// newRangeCluster starts a cluster whose nodes also host range groups
// 2 .. groups+1.
func newRangeCluster(t testing.TB, size int, seed uint64, groups int) *testCluster {
	t.Helper()
	return startRangeCluster(t, size, seed, groups, 0)
}

// startRangeCluster is newRangeCluster with the nodes' raft tick.
func startRangeCluster(t testing.TB, size int, seed uint64, groups int, tick time.Duration) *testCluster {
	t.Helper()
	return prepareRangeCluster(t, size, seed, groups, tick, nil)
}

// prepareRangeCluster is startRangeCluster with prepare called on each
// node before it runs (testCluster.prepare).
func prepareRangeCluster(t testing.TB, size int, seed uint64, groups int, tick time.Duration, prepare func(*testNode)) *testCluster {
	t.Helper()
	c := &testCluster{t: t, net: newSimNet(seed), nodes: map[uint64]*testNode{}, tick: tick, prepare: prepare}
	for g := range groups {
		c.groups = append(c.groups, uint64(g+2))
	}
	c.startAll(size)
	return c
}

// newTablesCluster starts a cluster whose tables get range groups of
// their own (Config.RangeGroups).
func newTablesCluster(t testing.TB, size int, seed uint64) *testCluster {
	t.Helper()
	c := &testCluster{t: t, net: newSimNet(seed), nodes: map[uint64]*testNode{}, rangeGroups: true}
	c.startAll(size)
	return c
}

// startAll starts nodes 1 .. size, the founders.
func (c *testCluster) startAll(size int) {
	t := c.t
	for i := 1; i <= size; i++ {
		c.peers = append(c.peers, uint64(i))
	}
	for _, id := range c.peers {
		c.start(id, vfs.NewMem())
	}
	t.Cleanup(c.stopAll)
}

// start runs node id on fs (a fresh disk, or a crash clone of its old one).
func (c *testCluster) start(id uint64, fs *vfs.MemFS) *testNode {
	c.t.Helper()
	return c.startAs(id, fs, false)
}

// startAs runs node id; join starts it as a new member the group added.
func (c *testCluster) startAs(id uint64, fs *vfs.MemFS, join bool) *testNode {
	c.t.Helper()
	tableCache := c.tableCache
	if tableCache == 0 {
		// Three tables open at most: every test runs the store's closing
		// and reopening of tables (partition/table_cache.go) under the
		// cluster.
		tableCache = 3
	}
	// Four span records cached, and a sweep past the fifth: the splits,
	// merges and snapshots of every test read records back from the
	// store (partition/span_cache.go).
	storeOpts := &partition.Options{LSM: lsm.Options{FS: fs, MemTableSize: 1 << 20}, SplitBytes: c.splitBytes,
		TableCacheSize: tableCache, SpanCacheSize: 4}
	store, err := OpenStore("/node", storeOpts)
	if err != nil {
		c.t.Fatalf("node %d: open store: %v", id, err)
	}
	rlog, err := raftlog.Open("/raft", &raftlog.Options{FS: fs, MemTableSize: 1 << 20})
	if err != nil {
		c.t.Fatalf("node %d: open raft log: %v", id, err)
	}
	tn := &testNode{id: id, fs: fs, store: store, rlog: rlog, done: make(chan error, 1)}
	ticks := make(chan time.Time)
	node, err := NewNode(Config{
		ID: id, Peers: c.peers, Join: join, Store: store, DataDir: "/node", Log: rlog, Ticks: ticks,
		FetchSnapshot: c.net.fetchSnapshot,
		Transport:     simTransport{net: c.net, from: id},
		TickInterval:  c.tickInterval(), ElectionTicks: 10,
		// Small: the log is compacted often, so lagging nodes catch up by
		// snapshot in every run.
		SyncEvery: 50, LogRetention: 30, RequestTimeout: 300 * time.Millisecond,
		Now: c.clock, SnapshotKeep: c.snapshotKeep, RangeGroups: c.rangeGroups, Members: c.members,
		Logger:            testLogger(),
		PlacementInterval: c.placementInterval, DeadAfter: c.deadAfter, MergeAfter: c.mergeAfter,
		RangeStats: c.net.rangeStats, StoreOptions: storeOpts,
	})
	if err != nil {
		c.t.Fatalf("node %d: %v", id, err)
	}
	for _, g := range c.groups {
		if err := node.hostGroup(g, &groupBoot{conf: &raftpb.ConfState{Voters: c.peers[:len(c.peers):len(c.peers)]}, member: id}); err != nil {
			c.t.Fatalf("node %d: %v", id, err)
		}
		node.group(g).tableless = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	tn.node, tn.cancel = node, cancel
	if c.prepare != nil {
		c.prepare(tn)
	}
	go func() { tn.done <- node.Run(ctx) }()
	go func() { // the node's raft clock, which a test may stop
		t := time.NewTicker(c.tickInterval())
		defer t.Stop()
		for {
			select {
			case now := <-t.C:
				if !tn.paused.Load() {
					select {
					case ticks <- now:
					case <-ctx.Done():
						return
					}
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	c.net.setNode(id, node)
	c.nodes[id] = tn
	return tn
}

// follower returns the id of a running node other than ld.
func (c *testCluster) follower(ld *testNode) uint64 {
	for id := range c.nodes {
		if id != ld.id {
			return id
		}
	}
	c.t.Fatalf("no node runs beside node %d", ld.id)
	return 0
}

// cutOff partitions node id from the other peers, and returns them.
func (c *testCluster) cutOff(id uint64) []uint64 {
	var others []uint64
	for _, p := range c.peers {
		if p != id {
			others = append(others, p)
		}
	}
	c.net.partition([]uint64{id}, others)
	return others
}

// stallAndCutOff stops old's raft clock (its process stalls) and cuts it
// off from the others, and returns the leader they elect: old still
// believes it leads.
func (c *testCluster) stallAndCutOff(old *testNode) *testNode {
	c.t.Helper()
	old.paused.Store(true)
	others := c.cutOff(old.id)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, id := range others {
			if tn := c.nodes[id]; tn != nil && tn.node.IsLeader() { // a stopped node is not among them
				return tn
			}
		}
	}
	c.t.Fatal("the majority elected no leader")
	return nil
}

// restartAll stops every node and starts it again on its disk, as a clean
// restart of the whole cluster.
func (c *testCluster) restartAll() {
	fss := map[uint64]*vfs.MemFS{}
	for id, tn := range c.nodes {
		fss[id] = tn.fs
	}
	for id := range fss {
		c.stop(id)
	}
	for id, fs := range fss {
		c.start(id, fs)
	}
}

// stop ends node id's run and closes its store and log.
func (c *testCluster) stop(id uint64) {
	tn := c.nodes[id]
	if tn == nil {
		return
	}
	c.net.setNode(id, nil)
	tn.cancel()
	if err := <-tn.done; err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrRemoved) {
		c.t.Errorf("node %d stopped: %v", id, err)
	}
	tn.node.Replica().Close()
	tn.rlog.Close()
	delete(c.nodes, id)
}

// crash stops node id as a power loss would: what was not synced is gone.
// It returns the disk as the crash left it.
func (c *testCluster) crash(id uint64, rng *rand.Rand) *vfs.MemFS {
	fs := c.powerLoss(c.nodes[id], rng)
	c.stop(id)
	return fs
}

// powerLoss silences tn and returns its disk as a power loss at this
// moment leaves it; tn runs on, unheard, until it is stopped. Silenced
// first: a message sent after the disk's picture, such as an
// acknowledgement of entries it lacks, would come from the future.
func (c *testCluster) powerLoss(tn *testNode, rng *rand.Rand) *vfs.MemFS {
	c.net.kill(tn.id)
	return tn.fs.CrashClone(rng)
}

func (c *testCluster) stopAll() {
	for id := range c.nodes {
		c.stop(id)
	}
	c.net.close()
}

// leader waits for a ready leader and returns it.
func (c *testCluster) leader(timeout time.Duration) *testNode {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, tn := range c.nodes {
			if tn.node.IsLeader() {
				return tn
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.t.Fatalf("no ready leader in %v", timeout)
	return nil
}

// waitVoter waits until the leader's configuration has node id among
// its voters (a joiner promoted), and returns that leader.
func (c *testCluster) waitVoter(id uint64, timeout time.Duration) *testNode {
	c.t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(10 * time.Millisecond) {
		ld := c.leader(timeout)
		ld.node.confMu.Lock()
		voter := slices.Contains(ld.node.conf.GetVoters(), id)
		ld.node.confMu.Unlock()
		if voter {
			return ld
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("node %d was not promoted to a voter in %v", id, timeout)
		}
	}
}

// converge waits until every running node has applied what the leader
// has (every write acknowledged so far), and the leader has applied
// nothing more meanwhile (a write whose client gave up may commit late).
func (c *testCluster) converge(timeout time.Duration) {
	c.t.Helper()
	for {
		target := c.leader(timeout).node.applied.Load()
		c.convergeSystem(target, timeout)
		if c.stable(func() uint64 { return c.leader(timeout).node.applied.Load() }, target) {
			return
		}
	}
}

// convergeSystem waits until every running node has applied the system
// group up to target.
func (c *testCluster) convergeSystem(target uint64, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for _, tn := range c.nodes {
		for tn.node.applied.Load() < target {
			if time.Now().After(deadline) {
				c.t.Fatalf("node %d applied %d of %d in %v", tn.id, tn.node.applied.Load(), target, timeout)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// dump lists a store's entities with timestamps and values.
func dump(t testing.TB, s *partition.Store, table string) string {
	t.Helper()
	return dumpSpan(t, s, partition.Span{Account: acct, Table: table})
}

// dumpSpan lists a store's entities of a span of a table.
func dumpSpan(t testing.TB, s *partition.Store, sp partition.Span) string {
	t.Helper()
	page, _, err := s.QueryEntitiesPage(context.Background(), acct, sp.Table, partition.EntityQuery{
		Within: &partition.PartitionRange{Low: sp.LowPartitionKey, High: sp.HighPartitionKey}})
	if err != nil {
		t.Fatal(err)
	}
	out := ""
	for _, e := range page {
		out += fmt.Sprintf("%s/%s@%d %x\n", e.PartitionKey, e.RowKey, e.Timestamp, e.Value)
	}
	return out
}

const acct = "devstoreaccount1"

// testLogger is the nodes' logger: silent, unless TABULA_TEST_LOG is set,
// when it writes every node's log to standard error.
func testLogger() *slog.Logger {
	if os.Getenv("TABULA_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// inBackground runs step(0), step(1), ... on a goroutine until the stop
// it returns is called, which waits for the step under way to end. A
// step must not call t.Fatal (not the test's goroutine).
func inBackground(step func(i int)) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			step(i)
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}
