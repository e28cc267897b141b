package cluster

import (
	"context"
	"io"
	"iter"
	"log/slog"
	"time"

	"github.com/tabuladb/tabula/cluster/raftlog"
	"github.com/tabuladb/tabula/partition"
)

// Config configures a Node. Zero durations and counts mean their defaults.
type Config struct {
	// ID is the node's id in the group, from 1.
	ID uint64
	// Peers are the ids of every voter, ID included. They bootstrap a
	// group that has no state on disk; a restarted node has them there.
	Peers []uint64
	// Join says the node is new to an existing group: it starts with no
	// configuration and learns the group's from the leader, which added
	// it (AddMember). Peers are then ignored.
	Join bool
	// Members is the internal address of the group's members as the node
	// knows them at its first start (the bootstrap list); the node keeps
	// its address book from then on (MEMBERS in DataDir), and OnMember
	// hears of every change to it (addr "" for a node removed).
	Members  map[uint64]string
	OnMember func(id uint64, addr string)
	// Store is the node's replica of the table service, opened by
	// OpenStore on DataDir with StoreOptions; Log its raft log. A snapshot
	// install replaces the store with another in DataDir: Node.Close
	// closes the one open then. The node does not close Log.
	Store        *partition.Store
	DataDir      string
	StoreOptions *partition.Options
	Log          *raftlog.Log
	// FetchSnapshot fetches the snapshot token names from node from (its
	// Node.ServeSnapshot, over the network). Without it the node cannot
	// catch up once its peers have compacted what it lacks.
	FetchSnapshot func(ctx context.Context, from uint64, token []byte) (io.ReadCloser, error)
	// Transport carries the node's messages; the node's Receive is what
	// the transport hands incoming ones to.
	Transport Transport
	Logger    *slog.Logger
	// Now is the wall clock of commit timestamps. Default time.Now.
	Now func() time.Time
	// TickInterval is raft's tick: heartbeats every HeartbeatTicks of
	// them, elections after ElectionTicks (randomized up to twice that).
	// Defaults 100 ms, 1 and 10: a leader's failure is noticed in 1–2 s.
	TickInterval                  time.Duration
	HeartbeatTicks, ElectionTicks int
	// Ticks, when set, is the node's raft clock instead of a ticker of
	// TickInterval: a test that stops it stands for a process paused (by
	// a collector, a VM, SIGSTOP) while the rest of the cluster moves on.
	Ticks <-chan time.Time
	// SyncEvery is how many applied commands pass between syncs of the
	// store, after which the raft log below the synced index may go.
	// Default 4096.
	SyncEvery uint64
	// RequestTimeout bounds a request's wait for its command or its read
	// round: past it a write is ambiguous (500 OperationTimedOut) and a
	// read refused. Default 10 s: the service's own timeouts are tens of
	// seconds, and a cluster that has not answered in ten is not going to.
	RequestTimeout time.Duration
	// SnapshotKeep is how long a leader keeps a snapshot it made for a
	// lagging follower after the snapshot was last handed out or streamed
	// (one being streamed is kept however long it takes). Default 10m.
	SnapshotKeep time.Duration
	// OnReady, when set, is called each time the node becomes the ready
	// leader (the server forgets what it cached as another node's
	// follower).
	OnReady func()
	// RangeGroups gives every table created from now on a raft group of
	// its own for its entities (range_group.go), on up to three nodes,
	// instead of replicating them in the system group. Only the leader
	// that proposes a creation reads it: every node hosts the groups the
	// catalog names it in, whatever its own setting.
	RangeGroups bool
	// LogRetention is how many entries below the synced applied index the
	// log keeps, so a follower briefly behind catches up from the log
	// rather than a snapshot of the whole store. Default 10,000.
	LogRetention uint64
	// PlacementInterval is how often the system group's leader looks
	// for range groups to move (placement.go); negative turns it off.
	// Default 1 s. DeadAfter is how long a node goes unheard before the
	// members it holds are replaced on other nodes. Default 5 minutes: a
	// restart or a short partition moves nothing.
	PlacementInterval time.Duration
	DeadAfter         time.Duration
	// MergeAfter is how long two neighbouring ranges of a table stay
	// cold (partition.Store.MergeThresholds) before the placement
	// controller merges them; negative turns merges off. Default 10
	// minutes: a range split by a burst of load stays split through a
	// lull.
	MergeAfter time.Duration
	// RangeStats yields every range's status from its leaseholder (the
	// HTTP's RangeStats, over the network), for the placement controller
	// to split and merge range groups and weigh them; nil means the
	// ranges this node holds the leases of.
	RangeStats func(ctx context.Context) iter.Seq[RangeStatus]
}

func (c *Config) withDefaults() Config {
	out := *c
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	if out.TickInterval <= 0 {
		out.TickInterval = 100 * time.Millisecond
	}
	if out.HeartbeatTicks <= 0 {
		out.HeartbeatTicks = 1
	}
	if out.ElectionTicks <= 0 {
		out.ElectionTicks = 10
	}
	if out.RequestTimeout <= 0 {
		out.RequestTimeout = 10 * time.Second
	}
	if out.SnapshotKeep <= 0 {
		out.SnapshotKeep = 10 * time.Minute
	}
	if out.SyncEvery == 0 {
		out.SyncEvery = 4096
	}
	if out.LogRetention == 0 {
		out.LogRetention = 10_000
	}
	if out.PlacementInterval == 0 {
		out.PlacementInterval = time.Second
	}
	if out.DeadAfter <= 0 {
		out.DeadAfter = 5 * time.Minute
	}
	if out.MergeAfter == 0 {
		out.MergeAfter = 10 * time.Minute
	}
	return out
}
