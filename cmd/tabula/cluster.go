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
	"iter"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

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

// clusterFlags are serve's flags of cluster mode.
type clusterFlags struct {
	join, nodeAddr, secret string
	routes                 routeFlag
	logKeep, syncEvery     uint64
	rangeGroups            bool
	deadAfter, placeEvery  time.Duration
	mergeAfter             time.Duration
}

func (cf *clusterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&cf.join, "join", "", "cluster mode: the internal address of every node, the same list on every node (host:port,host:port,...)")
	fs.StringVar(&cf.nodeAddr, "node-addr", "", "cluster mode: this node's internal address, one of --join")
	fs.StringVar(&cf.secret, "cluster-secret", "", "cluster mode: the secret every node shares (default $"+secretEnv+"); at least 16 characters")
	fs.Uint64Var(&cf.logKeep, "raft-log-keep", 10_000, "cluster mode: raft log entries kept below the synced applied index, for followers briefly behind (further behind, they get a snapshot)")
	fs.Uint64Var(&cf.syncEvery, "raft-sync-every", 4096, "cluster mode: commands applied between syncs of the store, after which the raft log below them may go")
	fs.BoolVar(&cf.rangeGroups, "range-groups", true, "cluster mode: give every table created while this node leads a raft group of its own on up to three nodes (false: replicate its entities in the one system group, beside the catalog; docs/cluster.md)")
	fs.DurationVar(&cf.deadAfter, "dead-after", 5*time.Minute, "cluster mode: how long a node goes unheard before the system group's leader moves its range groups' members to other nodes")
	fs.DurationVar(&cf.mergeAfter, "merge-after", 10*time.Minute, "cluster mode: how long two neighbouring ranges stay cold before the placement controller merges them (negative: never)")
	fs.DurationVar(&cf.placeEvery, "placement-interval", time.Second, "cluster mode: how often the system group's leader looks for range groups to move (dead or draining nodes, groups short of three, an uneven spread); 0 turns it off")
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
	// exited is closed when the node's Run returns; runErr is its error
	// (ErrRemoved for a node decommissioned).
	exited chan struct{}
	runErr error
}

// parse reads --join (the founding members' internal addresses, by id:
// their position in the list, from 1) and the secret.
func (cf *clusterFlags) parse() (founders map[uint64]string, secret []byte, err error) {
	secret = []byte(cf.secret)
	if len(secret) == 0 {
		secret = []byte(os.Getenv(secretEnv))
	}
	if len(secret) < minSecretLen {
		return nil, nil, fmt.Errorf("--cluster-secret (or $%s) must be at least %d characters", secretEnv, minSecretLen)
	}
	if cf.nodeAddr == "" {
		return nil, nil, errors.New("--node-addr is needed in cluster mode")
	}
	if _, _, err := net.SplitHostPort(cf.nodeAddr); err != nil {
		return nil, nil, fmt.Errorf("--node-addr %q is not host:port", cf.nodeAddr)
	}
	founders = map[uint64]string{}
	for i, a := range strings.Split(cf.join, ",") {
		a = strings.TrimSpace(a)
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, nil, fmt.Errorf("--join: %q is not host:port", a)
		}
		for _, seen := range founders {
			if seen == a {
				return nil, nil, fmt.Errorf("--join: %s is listed twice", a)
			}
		}
		founders[uint64(i+1)] = a
	}
	return founders, secret, nil
}

// clusterID names a cluster: a MAC of its founding members under its
// secret, so a directory of another cluster (or of this one under another
// secret) is recognized without the secret ever being written down.
func clusterID(founders map[uint64]string, secret []byte) string {
	m := hmac.New(sha256.New, secret)
	for id := uint64(1); id <= uint64(len(founders)); id++ {
		fmt.Fprintf(m, "%d=%s\n", id, founders[id])
	}
	return hex.EncodeToString(m.Sum(nil))[:32]
}

// clusterPlan is a cluster node's identity, checked against its data
// directory before anything in it is opened.
type clusterPlan struct {
	flags    clusterFlags
	dir      string
	founders map[uint64]string
	cluster  string
	self     uint64 // 0: a new node, to be added by the cluster
	secret   []byte
	members  map[uint64]string // the address book the cluster gave a new node
}

// prepare reads the cluster flags and checks (or claims) the data
// directory: a cluster node keeps its store in store-N/ (named by the
// STORE file; a snapshot install makes the next), its raft log in raft/
// and its address book in MEMBERS, beside the CLUSTER file naming the
// cluster and the node. A node whose --node-addr is not in --join, with
// no CLUSTER yet, is a new member: startCluster asks the cluster to add
// it.
func (cf clusterFlags) prepare(dataDir string) (clusterPlan, error) {
	founders, secret, err := cf.parse()
	if err != nil {
		return clusterPlan{}, err
	}
	plan := clusterPlan{flags: cf, dir: dataDir, founders: founders, cluster: clusterID(founders, secret), secret: secret}
	var founderID uint64
	for id, a := range founders {
		if a == cf.nodeAddr {
			founderID = id
		}
	}
	id, ok, err := cluster.ReadIdentity(dataDir)
	switch {
	case err != nil:
		return clusterPlan{}, err
	case ok && id.Cluster != plan.cluster:
		return clusterPlan{}, fmt.Errorf("%s belongs to another cluster (%s names cluster %s; this --join list and secret make %s): start it with the --join list and secret it was made with",
			dataDir, cluster.IdentityFile, id.Cluster, plan.cluster)
	case ok && id.Removed:
		return clusterPlan{}, fmt.Errorf("%s belongs to node %d, which the cluster removed: start a new node from an empty directory", dataDir, id.Node)
	case ok && founderID != 0 && id.Node != founderID:
		return clusterPlan{}, fmt.Errorf("%s belongs to node %d, but --node-addr %s is node %d of --join", dataDir, id.Node, cf.nodeAddr, founderID)
	case ok:
		plan.self = id.Node
	default:
		if entries, _ := os.ReadDir(dataDir); slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() == "CURRENT" }) {
			return clusterPlan{}, fmt.Errorf("%s holds a single-node store: a cluster node starts from an empty directory", dataDir)
		}
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return clusterPlan{}, err
		}
		if founderID != 0 {
			plan.self = founderID
			if err := cluster.WriteIdentity(dataDir, cluster.Identity{Cluster: plan.cluster, Node: founderID}); err != nil {
				return clusterPlan{}, err
			}
		}
	}
	if plan.self != 0 && cf.routes[plan.self] != "" {
		return clusterPlan{}, fmt.Errorf("--peer %d: that is this node", plan.self)
	}
	return plan, nil
}

// join asks the founders' nodes, following the leader, to add this node
// at its --node-addr, and records the id it gets.
func (p *clusterPlan) join() error {
	client := &http.Client{Timeout: 35 * time.Second}
	targets := slices.Sorted(maps.Values(p.founders))
	var last error
	for attempt := 0; attempt < 50; attempt++ {
		addr := targets[attempt%len(targets)]
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/cluster/members?addr="+url.QueryEscape(p.flags.nodeAddr), nil)
		transport.Sign(req, p.secret, "member", 0, 0, time.Now())
		resp, err := client.Do(req)
		if err != nil {
			last = err
			time.Sleep(200 * time.Millisecond)
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			var a struct {
				ID      uint64
				Members map[uint64]string
			}
			if err := json.Unmarshal(body, &a); err != nil || a.ID == 0 {
				return fmt.Errorf("joining: a bad answer from %s: %q", addr, body)
			}
			p.self, p.members = a.ID, a.Members
			return cluster.WriteIdentity(p.dir, cluster.Identity{Cluster: p.cluster, Node: a.ID})
		case resp.StatusCode == http.StatusUnauthorized:
			return fmt.Errorf("%s refused this node (%s): the cluster secret or the --join list does not match the cluster's", addr, bytes.TrimSpace(body))
		case resp.Header.Get("X-Tabula-Leader") != "":
			// Ask the leader next.
			targets = append([]string{resp.Header.Get("X-Tabula-Leader")}, targets...)
			attempt = -1
		}
		last = fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("joining the cluster: %v", last)
}

// route is where this node reaches node id: --peer's address, else addr.
func (p clusterPlan) route(id uint64, addr string) string {
	if r := p.flags.routes[id]; r != "" {
		return r
	}
	return addr
}

// startCluster joins store (opened by cluster.OpenStore on plan.dir) to
// the cluster and starts the node; serve then answers the REST API
// through it. A new node first asks the cluster to add it.
func startCluster(plan clusterPlan, store *partition.Store, log *slog.Logger, onReady func()) (*clusterSetup, error) {
	cf, secret := plan.flags, plan.secret
	joining := plan.self == 0
	if joining {
		if err := plan.join(); err != nil {
			return nil, err
		}
		log.Info("the cluster added this node", "node", plan.self)
	}
	self := plan.self
	// The log's entries are deleted soon after they apply: a small
	// memtable holds them, and few reach a table.
	rlog, err := raftlog.Open(filepath.Join(plan.dir, "raft"), &raftlog.Options{MemTableSize: 16 << 20})
	if err != nil {
		return nil, fmt.Errorf("open the raft log: %w", err)
	}
	c := &clusterSetup{rlog: rlog, exited: make(chan struct{})}
	ln, err := net.Listen("tcp", cf.nodeAddr)
	if err != nil {
		rlog.Close()
		return nil, fmt.Errorf("--node-addr: %w (another node may be running there)", err)
	}
	var node *cluster.Node
	var httpFace *cluster.HTTP
	c.tr = transport.New(transport.Options{NodeID: self, Secret: secret, Logger: log,
		Deliver: func(_ uint64, msgs []transport.Message) { node.Receive(msgs) }})
	members := maps.Clone(plan.founders)
	maps.Copy(members, plan.members)
	members[self] = cf.nodeAddr
	node, err = cluster.NewNode(cluster.Config{ID: self, Peers: slices.Sorted(maps.Keys(plan.founders)), Join: joining,
		Members: members, Store: store, DataDir: plan.dir,
		Log: rlog, Transport: c.tr, Logger: log, OnReady: onReady, LogRetention: cf.logKeep, SyncEvery: cf.syncEvery,
		RangeGroups: cf.rangeGroups, DeadAfter: cf.deadAfter, MergeAfter: cf.mergeAfter, PlacementInterval: placementInterval(cf.placeEvery),
		OnMember: func(id uint64, addr string) {
			if addr != "" && id != self {
				c.tr.SetPeer(id, plan.route(id, addr))
			}
		},
		FetchSnapshot: func(ctx context.Context, from uint64, token []byte) (io.ReadCloser, error) {
			return httpFace.FetchSnapshot(ctx, from, token)
		},
		RangeStats: func(ctx context.Context) iter.Seq[cluster.RangeStatus] { return httpFace.RangeStats(ctx) },
	})
	if err != nil {
		c.tr.Close()
		ln.Close()
		rlog.Close()
		return nil, err
	}
	for id, addr := range node.Members() {
		if id != self {
			c.tr.SetPeer(id, plan.route(id, addr))
		}
	}
	c.node = node
	c.http = cluster.NewHTTP(node, c.tr.Handler(), cf.routes, secret)
	httpFace = c.http
	c.internal = &http.Server{Handler: c.http.Internal(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	transport.ConfigureServer(c.internal)
	go c.internal.Serve(ln)
	if err := helloPeers(node.Members(), self, secret, plan.route); err != nil {
		c.internal.Close()
		c.tr.Close()
		rlog.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() {
		c.runErr = node.Run(ctx)
		if errors.Is(c.runErr, cluster.ErrRemoved) {
			if err := cluster.WriteIdentity(plan.dir, cluster.Identity{Cluster: plan.cluster, Node: self, Removed: true}); err != nil {
				log.Error("marking the data directory removed", "err", err)
			}
		}
		close(c.exited)
	}()
	log.Info("cluster node started", "node", self, "node_addr", cf.nodeAddr, "members", len(node.Members()))
	return c, nil
}

// helloPeers asks every reachable peer whether it takes this node's
// signature: a peer that refuses it means the secret is not the cluster's,
// and the node stops before it mixes anything in. Peers not up yet are
// skipped.
func helloPeers(peers map[uint64]string, self uint64, secret []byte, route func(uint64, string) string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	for id, addr := range peers {
		if id == self {
			continue
		}
		addr = route(id, addr)
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/cluster/hello", nil)
		transport.Sign(req, secret, "hello", self, id, time.Now())
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
	<-c.exited
	err := c.runErr
	if errors.Is(err, context.Canceled) || errors.Is(err, cluster.ErrRemoved) {
		err = nil
	}
	c.internal.Close()
	c.tr.Close()
	return errors.Join(err, c.rlog.Close(), c.node.Replica().Close())
}

// placementInterval is serve's --placement-interval as the node takes
// it: 0 turns the controller off.
func placementInterval(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}
