package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/tabuladb/tabula/cluster"
	"github.com/tabuladb/tabula/cluster/raftlog"
	"github.com/tabuladb/tabula/cluster/transport"
	"github.com/tabuladb/tabula/partition"
)

// secretEnv is where the cluster secret comes from when --cluster-secret
// is not given: keeping it off the command line keeps it out of ps.
const secretEnv = "TABULA_CLUSTER_SECRET"

// minSecretLen is the shortest cluster secret taken.
const minSecretLen = 16

// identityFile records, in a node's data directory, the cluster and node
// the directory belongs to.
const identityFile = "CLUSTER"

// clusterFlags are serve's flags of cluster mode.
type clusterFlags struct {
	join, nodeAddr, secret string
	routes                 routeFlag
	logKeep, syncEvery     uint64
}

func (cf *clusterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&cf.join, "join", "", "cluster mode: the internal address of every node, the same list on every node (host:port,host:port,...)")
	fs.StringVar(&cf.nodeAddr, "node-addr", "", "cluster mode: this node's internal address, one of --join")
	fs.StringVar(&cf.secret, "cluster-secret", "", "cluster mode: the secret every node shares (default $"+secretEnv+"); at least 16 characters")
	fs.Uint64Var(&cf.logKeep, "raft-log-keep", 10_000, "cluster mode: raft log entries kept below the synced applied index, for followers briefly behind (further behind, they get a snapshot)")
	fs.Uint64Var(&cf.syncEvery, "raft-sync-every", 4096, "cluster mode: commands applied between syncs of the store, after which the raft log below them may go")
	fs.Var(&cf.routes, "peer", "cluster mode: reach node ID at ADDR instead of its --join address (ID=ADDR, repeatable): through a proxy, a tunnel, or a test's cuttable link")
}

// routeFlag is the repeatable --peer ID=ADDR.
type routeFlag map[uint64]string

func (r *routeFlag) String() string { return fmt.Sprint(map[uint64]string(*r)) }

func (r *routeFlag) Set(v string) error {
	id, addr, ok := strings.Cut(v, "=")
	n, err := strconv.ParseUint(id, 10, 64)
	if !ok || err != nil || n == 0 {
		return fmt.Errorf("want ID=HOST:PORT, got %q", v)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("%q: %v", addr, err)
	}
	if *r == nil {
		*r = routeFlag{}
	}
	(*r)[n] = addr
	return nil
}

// clusterSetup is a started cluster node: what serve needs from it, and
// how to stop it.
type clusterSetup struct {
	node     *cluster.Node
	http     *cluster.HTTP
	internal *http.Server
	tr       *transport.Transport
	rlog     *raftlog.Log
	cancel   context.CancelFunc
	done     chan error
}

// parseJoin reads --join and --node-addr: every node's address by id (its
// position in the list, from 1) and this node's id.
func (cf *clusterFlags) parse() (peers map[uint64]string, self uint64, secret []byte, err error) {
	secret = []byte(cf.secret)
	if len(secret) == 0 {
		secret = []byte(os.Getenv(secretEnv))
	}
	if len(secret) < minSecretLen {
		return nil, 0, nil, fmt.Errorf("--cluster-secret (or $%s) must be at least %d characters", secretEnv, minSecretLen)
	}
	peers = map[uint64]string{}
	for i, a := range strings.Split(cf.join, ",") {
		a = strings.TrimSpace(a)
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, 0, nil, fmt.Errorf("--join: %q is not host:port", a)
		}
		for _, seen := range peers {
			if seen == a {
				return nil, 0, nil, fmt.Errorf("--join: %s is listed twice", a)
			}
		}
		peers[uint64(i+1)] = a
		if a == cf.nodeAddr {
			self = uint64(i + 1)
		}
	}
	if self == 0 {
		return nil, 0, nil, fmt.Errorf("--node-addr %q is not in --join", cf.nodeAddr)
	}
	for id := range cf.routes {
		if peers[id] == "" || id == self {
			return nil, 0, nil, fmt.Errorf("--peer %d: not another node of --join", id)
		}
	}
	return peers, self, secret, nil
}

// clusterID names a cluster: a MAC of its node list under its secret, so a
// directory of another cluster (or of this one under another secret) is
// recognized without the secret ever being written down.
func clusterID(peers map[uint64]string, secret []byte) string {
	m := hmac.New(sha256.New, secret)
	for id := uint64(1); id <= uint64(len(peers)); id++ {
		fmt.Fprintf(m, "%d=%s\n", id, peers[id])
	}
	return hex.EncodeToString(m.Sum(nil))[:32]
}

// checkIdentity refuses a data directory that belongs to another cluster
// or another node, and marks a new one as this node's.
func checkIdentity(dir, cluster string, node uint64) error {
	want := fmt.Sprintf("cluster %s\nnode %d\n", cluster, node)
	path := filepath.Join(dir, identityFile)
	got, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if entries, _ := os.ReadDir(dir); slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() == "CURRENT" }) {
			return fmt.Errorf("%s holds a single-node store: a cluster node starts from an empty directory", dir)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		return os.WriteFile(path, []byte(want), 0o600)
	case err != nil:
		return err
	case string(got) != want:
		return fmt.Errorf("%s belongs to another cluster or node (%s says %q; this one is %q): start it with the --join list and secret it was made with",
			dir, path, strings.TrimSpace(string(got)), strings.TrimSpace(want))
	}
	return nil
}

// clusterPlan is a cluster node's identity, checked against its data
// directory before anything in it is opened.
type clusterPlan struct {
	flags  clusterFlags
	dir    string
	peers  map[uint64]string
	self   uint64
	secret []byte
}

// prepare reads the cluster flags and checks (or claims) the data
// directory: a cluster node keeps its store in store-N/ (named by the
// STORE file; a snapshot install makes the next) and its raft log in
// raft/, beside the CLUSTER file naming the cluster and the node.
func (cf clusterFlags) prepare(dataDir string) (clusterPlan, error) {
	peers, self, secret, err := cf.parse()
	if err != nil {
		return clusterPlan{}, err
	}
	if err := checkIdentity(dataDir, clusterID(peers, secret), self); err != nil {
		return clusterPlan{}, err
	}
	return clusterPlan{flags: cf, dir: dataDir, peers: peers, self: self, secret: secret}, nil
}

// routes are the addresses this node reaches the others at: their --join
// addresses unless --peer says otherwise. The cluster's identity stays
// the --join list.
func (p clusterPlan) routes() map[uint64]string {
	out := make(map[uint64]string, len(p.peers))
	for id, addr := range p.peers {
		if r := p.flags.routes[id]; r != "" {
			addr = r
		}
		out[id] = addr
	}
	return out
}

// startCluster joins store (opened by cluster.OpenStore on plan.dir) to
// the cluster and starts the node; serve then answers the REST API
// through it.
func startCluster(plan clusterPlan, store *partition.Store, log *slog.Logger, onReady func()) (*clusterSetup, error) {
	cf, peers, self, secret := plan.flags, plan.routes(), plan.self, plan.secret
	// The log's entries are deleted soon after they apply: a small
	// memtable holds them, and few reach a table.
	rlog, err := raftlog.Open(filepath.Join(plan.dir, "raft"), &raftlog.Options{MemTableSize: 16 << 20})
	if err != nil {
		return nil, fmt.Errorf("open the raft log: %w", err)
	}
	c := &clusterSetup{rlog: rlog, done: make(chan error, 1)}
	ln, err := net.Listen("tcp", cf.nodeAddr)
	if err != nil {
		rlog.Close()
		return nil, fmt.Errorf("--node-addr: %w (another node may be running there)", err)
	}
	var node *cluster.Node
	var httpFace *cluster.HTTP
	c.tr = transport.New(transport.Options{NodeID: self, Secret: secret, Logger: log,
		Deliver: func(_ uint64, msgs []*raftpb.Message) { node.Receive(msgs) }})
	for id, addr := range peers {
		if id != self {
			c.tr.SetPeer(id, addr)
		}
	}
	node, err = cluster.NewNode(cluster.Config{ID: self, Peers: slices.Sorted(mapKeys(peers)), Store: store, DataDir: plan.dir,
		Log: rlog, Transport: c.tr, Logger: log, OnReady: onReady, LogRetention: cf.logKeep, SyncEvery: cf.syncEvery,
		FetchSnapshot: func(ctx context.Context, from uint64, token []byte) (io.ReadCloser, error) {
			return httpFace.FetchSnapshot(ctx, from, token)
		}})
	if err != nil {
		c.tr.Close()
		ln.Close()
		rlog.Close()
		return nil, err
	}
	c.node = node
	c.http = cluster.NewHTTP(node, c.tr.Handler(), peers, secret)
	httpFace = c.http
	c.internal = &http.Server{Handler: c.http.Internal(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	transport.ConfigureServer(c.internal)
	go c.internal.Serve(ln)
	if err := helloPeers(peers, self, secret); err != nil {
		c.internal.Close()
		c.tr.Close()
		rlog.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() { c.done <- node.Run(ctx) }()
	log.Info("cluster node started", "node", self, "node_addr", cf.nodeAddr, "peers", len(peers))
	return c, nil
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// helloPeers asks every reachable peer whether it takes this node's
// signature: a peer that refuses it means the secret is not the cluster's,
// and the node stops before it mixes anything in. Peers not up yet are
// skipped.
func helloPeers(peers map[uint64]string, self uint64, secret []byte) error {
	client := &http.Client{Timeout: 2 * time.Second}
	for id, addr := range peers {
		if id == self {
			continue
		}
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/cluster/hello", nil)
		transport.Sign(req.Header, secret, "hello", self, id, time.Now())
		resp, err := client.Do(req)
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized {
			return fmt.Errorf("node %d at %s refused this node (%s): the cluster secret or the --join list does not match the cluster's",
				id, addr, strings.TrimSpace(string(body)))
		}
	}
	return nil
}

// stop stops the node and closes what startCluster opened, the store
// included (a snapshot install may have replaced the one serve opened).
func (c *clusterSetup) stop() error {
	c.cancel()
	err := <-c.done
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	c.internal.Close()
	c.tr.Close()
	return errors.Join(err, c.rlog.Close(), c.node.Replica().Close())
}

// clusterCommand runs `tabula cluster ...`.
func clusterCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "status" {
		fmt.Fprintln(stderr, "usage: tabula cluster status --node HOST:PORT [--cluster-secret S]")
		return 2
	}
	fs := flag.NewFlagSet("cluster status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodeAddr := fs.String("node", "", "the internal address of any node")
	secretFlag := fs.String("cluster-secret", "", "the cluster secret (default $"+secretEnv+")")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	secret := []byte(*secretFlag)
	if len(secret) == 0 {
		secret = []byte(os.Getenv(secretEnv))
	}
	if *nodeAddr == "" || len(secret) == 0 {
		fmt.Fprintln(stderr, "tabula cluster status: --node and the cluster secret are needed")
		return 2
	}
	first, err := fetchStatus(*nodeAddr, 0, secret)
	if err != nil {
		fmt.Fprintln(stderr, "tabula cluster status:", err)
		return 1
	}
	// Every node's own view, and the leader's of the replication.
	statuses := map[uint64]cluster.Status{first.Node: first}
	errs := map[uint64]error{}
	for _, p := range first.Peers {
		if p.Node != first.Node {
			if st, err := fetchStatus(p.Addr, p.Node, secret); err != nil {
				errs[p.Node] = err
			} else {
				statuses[p.Node] = st
			}
		}
	}
	match := map[uint64]uint64{}
	for _, st := range statuses {
		if st.State == "StateLeader" {
			for _, p := range st.Peers {
				match[p.Node] = p.Match
			}
		}
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "node\taddr\tstate\tleader\tterm\tcommit\tapplied\tmatch\tnote")
	for _, p := range first.Peers {
		st, ok := statuses[p.Node]
		if !ok {
			fmt.Fprintf(tw, "%d\t%s\tunreachable\t\t\t\t\t%d\t%v\n", p.Node, p.Addr, match[p.Node], errs[p.Node])
			continue
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", st.Node, p.Addr, strings.TrimPrefix(st.State, "State"),
			st.Leader, st.Term, st.Commit, st.Applied, match[p.Node], st.Failed)
	}
	tw.Flush()
	return 0
}

// fetchStatus reads a node's status; id is the node's id, or 0 for
// whichever node answers at addr.
func fetchStatus(addr string, id uint64, secret []byte) (cluster.Status, error) {
	var st cluster.Status
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/cluster/status", nil)
	transport.Sign(req.Header, secret, "status", 0, id, time.Now())
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
	}
	return st, json.Unmarshal(body, &st)
}
