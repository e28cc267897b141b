package server_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/tabuladb/tabula/cluster"
	"github.com/tabuladb/tabula/cluster/raftlog"
	"github.com/tabuladb/tabula/cluster/transport"
	"github.com/tabuladb/tabula/server"
)

// startClusterServer runs three cluster nodes in this process, each with
// its store, raft log, transport and internal address on loopback and a
// REST server through which it forwards to the leader, and returns the
// REST server of a node that is not the leader: a client of it goes
// through forwarding and replication on every request. With rangeGroups,
// every table gets a range group of its own.
func startClusterServer(t testing.TB, opts *server.Options, rangeGroups bool) *testServer {
	t.Helper()
	const size = 3
	secret := []byte("server-tests-cluster-secret")
	var lns []net.Listener
	peers := map[uint64]string{}
	for id := uint64(1); id <= size; id++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		peers[id] = ln.Addr().String()
	}
	type member struct {
		node *cluster.Node
		ts   *testServer
	}
	var members []member
	for id := uint64(1); id <= size; id++ {
		dataDir := t.TempDir()
		store, err := cluster.OpenStore(dataDir, nil)
		if err != nil {
			t.Fatal(err)
		}
		rlog, err := raftlog.Open(t.TempDir(), &raftlog.Options{MemTableSize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		var node *cluster.Node
		tr := transport.New(transport.Options{NodeID: id, Secret: secret,
			Deliver: func(_ uint64, msgs []transport.Message) { node.Receive(msgs) }})
		for pid, addr := range peers {
			if pid != id {
				tr.SetPeer(pid, addr)
			}
		}
		var h *cluster.HTTP
		node, err = cluster.NewNode(cluster.Config{ID: id, Peers: []uint64{1, 2, 3}, Store: store, DataDir: dataDir, Log: rlog, Transport: tr,
			TickInterval: 20 * time.Millisecond, RangeGroups: rangeGroups,
			FetchSnapshot: func(ctx context.Context, from uint64, token []byte) (io.ReadCloser, error) {
				return h.FetchSnapshot(ctx, from, token)
			}})
		if err != nil {
			t.Fatal(err)
		}
		h = cluster.NewHTTP(node, tr.Handler(), peers, secret)
		internal := &http.Server{Handler: h.Internal()}
		transport.ConfigureServer(internal)
		go internal.Serve(lns[id-1])
		o := server.Options{}
		if opts != nil {
			o = *opts
		}
		o.Front = h.Public
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- node.Run(ctx) }()
		// Cleanups run last-registered first: the REST server stops
		// first, then the node, then its store (which the node applies
		// entries to until it stops), then its log.
		t.Cleanup(func() {
			if err := rlog.Close(); err != nil {
				t.Errorf("node %d: closing the raft log: %v", id, err)
			}
		})
		t.Cleanup(func() {
			// The node's store: a snapshot install may have replaced
			// the one opened here.
			if err := node.Replica().Close(); err != nil {
				t.Errorf("node %d: closing the store: %v", id, err)
			}
		})
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("node %d: %v", id, err)
			}
			internal.Close()
			tr.Close()
		})
		ts := serveBackend(t, node.Store(), &o)
		ts.Store = store
		members = append(members, member{node: node, ts: ts})
	}
	// Ready when a leader has committed an entry of its term and a
	// follower knows it: before that the follower answers 503 ServerBusy,
	// which the tests' clients do not retry.
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range members {
			if !m.node.IsLeader() {
				continue
			}
			for _, f := range members {
				if f.node != m.node && f.node.Leader() == m.node.Leader() {
					return f.ts
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the cluster elected no leader that a follower knows in 20 s")
	return nil
}

var _ server.Store = (*cluster.Store)(nil)
