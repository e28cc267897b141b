package main

import (
	"bytes"
	"cmp"
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
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tabuladb/tabula/cluster"
	"github.com/tabuladb/tabula/cluster/raftlog"
	"github.com/tabuladb/tabula/cluster/transport"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/server/auth"
	"github.com/tabuladb/tabula/vfs"
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

// identity is what CLUSTER says of a data directory: the cluster and node
// it belongs to, and whether the cluster removed that node.
type identity struct {
	cluster string
	node    uint64
	removed bool
}

func (id identity) encode() []byte {
	s := fmt.Sprintf("cluster %s\nnode %d\n", id.cluster, id.node)
	if id.removed {
		s += "removed\n"
	}
	return []byte(s)
}

// readIdentity reads CLUSTER; ok is false when there is none.
func readIdentity(dir string) (id identity, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, identityFile))
	if errors.Is(err, fs.ErrNotExist) {
		return identity{}, false, nil
	}
	if err != nil {
		return identity{}, false, err
	}
	id, ok = parseIdentity(b)
	if !ok {
		return identity{}, false, fmt.Errorf("%s is damaged", filepath.Join(dir, identityFile))
	}
	return id, true, nil
}

// parseIdentity reads CLUSTER's content (docs/cluster-files.md).
func parseIdentity(b []byte) (id identity, ok bool) {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "cluster ") {
		return identity{}, false
	}
	id.cluster = strings.TrimPrefix(lines[0], "cluster ")
	if _, err := fmt.Sscanf(lines[1], "node %d", &id.node); err != nil || id.node == 0 {
		return identity{}, false
	}
	id.removed = len(lines) > 2 && lines[2] == "removed"
	return id, true
}

// writeIdentity replaces the identity file atomically and durably: a
// power loss must not leave a directory that a later start, under another
// --join list or secret, takes for a new one (or a removed node's
// directory without its mark).
func writeIdentity(dir string, id identity) error {
	path := filepath.Join(dir, identityFile)
	if err := vfs.WriteFileAtomic(vfs.Default(), path, id.encode()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
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
	id, ok, err := readIdentity(dataDir)
	switch {
	case err != nil:
		return clusterPlan{}, err
	case ok && id.cluster != plan.cluster:
		return clusterPlan{}, fmt.Errorf("%s belongs to another cluster (%s names cluster %s; this --join list and secret make %s): start it with the --join list and secret it was made with",
			dataDir, identityFile, id.cluster, plan.cluster)
	case ok && id.removed:
		return clusterPlan{}, fmt.Errorf("%s belongs to node %d, which the cluster removed: start a new node from an empty directory", dataDir, id.node)
	case ok && founderID != 0 && id.node != founderID:
		return clusterPlan{}, fmt.Errorf("%s belongs to node %d, but --node-addr %s is node %d of --join", dataDir, id.node, cf.nodeAddr, founderID)
	case ok:
		plan.self = id.node
	default:
		if entries, _ := os.ReadDir(dataDir); slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() == "CURRENT" }) {
			return clusterPlan{}, fmt.Errorf("%s holds a single-node store: a cluster node starts from an empty directory", dataDir)
		}
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return clusterPlan{}, err
		}
		if founderID != 0 {
			plan.self = founderID
			if err := writeIdentity(dataDir, identity{cluster: plan.cluster, node: founderID}); err != nil {
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
			return writeIdentity(p.dir, identity{cluster: p.cluster, node: a.ID})
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
		RangeStats: func(ctx context.Context) []cluster.RangeStatus { return httpFace.RangeStats(ctx) },
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
			if err := writeIdentity(plan.dir, identity{cluster: plan.cluster, node: self, removed: true}); err != nil {
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

// operatorSecret is the cluster secret an operator's command signs with:
// --cluster-secret, or $TABULA_CLUSTER_SECRET.
func operatorSecret(flagValue string) []byte {
	if flagValue != "" {
		return []byte(flagValue)
	}
	return []byte(os.Getenv(secretEnv))
}

// placementInterval is serve's --placement-interval as the node takes
// it: 0 turns the controller off.
func placementInterval(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// clusterCommand runs `tabula cluster ...`.
func clusterCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "decommission":
			return decommission(args[1:], stdout, stderr)
		case "transfer-lease":
			return transferLease(args[1:], stdout, stderr)
		case "move":
			return moveTable(args[1:], stdout, stderr)
		case "split":
			return reshapeTable("split", args[1:], stdout, stderr)
		case "merge":
			return reshapeTable("merge", args[1:], stdout, stderr)
		}
	}
	if len(args) == 0 || args[0] != "status" {
		fmt.Fprintln(stderr, `usage: tabula cluster status --node HOST:PORT [--cluster-secret S]
       tabula cluster decommission --node HOST:PORT --id N [--drain-timeout D] [--cluster-secret S]
       tabula cluster transfer-lease --node HOST:PORT --table NAME --to N [--at PARTITIONKEY] [--account A] [--cluster-secret S]
       tabula cluster move --node HOST:PORT --table NAME --voters N,N,N [--at PARTITIONKEY] [--account A] [--cluster-secret S]
       tabula cluster split --node HOST:PORT --table NAME --at PARTITIONKEY [--account A] [--cluster-secret S]
       tabula cluster merge --node HOST:PORT --table NAME --at PARTITIONKEY [--account A] [--cluster-secret S]`)
		return 2
	}
	fs := flag.NewFlagSet("cluster status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodeAddr := fs.String("node", "", "the internal address of any node")
	secretFlag := fs.String("cluster-secret", "", "the cluster secret (default $"+secretEnv+")")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	secret := operatorSecret(*secretFlag)
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
	var ranges []cluster.RangeStatus
	// Liveness: how many of the other nodes that answered hear from each.
	heardBy, asked := map[uint64]int{}, 0
	for _, st := range statuses {
		if st.State == "StateLeader" {
			for _, p := range st.Peers {
				match[p.Node] = p.Match
			}
		}
		ranges = append(ranges, st.Ranges...) // each range from its leaseholder
		asked++
		for _, p := range st.Peers {
			if p.Live && p.Node != st.Node {
				heardBy[p.Node]++
			}
		}
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "node\taddr\tstate\tleader\tterm\tcommit\tapplied\tmatch\tlive\tgroups\tquiet\tnote")
	for _, p := range first.Peers {
		others := asked
		if _, ok := statuses[p.Node]; ok {
			others-- // a node does not vouch for itself
		}
		live := fmt.Sprintf("%d/%d", heardBy[p.Node], others)
		var notes []string
		if p.Draining {
			notes = append(notes, "draining")
		}
		if p.DownSince != nil {
			notes = append(notes, "down since "+p.DownSince.UTC().Format(time.RFC3339))
		}
		st, ok := statuses[p.Node]
		if !ok {
			notes = append(notes, fmt.Sprint(errs[p.Node]))
			fmt.Fprintf(tw, "%d\t%s\tunreachable\t\t\t\t\t%d\t%s\t\t\t%s\n", p.Node, p.Addr, match[p.Node], live, strings.Join(notes, "; "))
			continue
		}
		if st.Failed != "" {
			notes = append(notes, st.Failed)
		}
		note := strings.Join(notes, "; ")
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t%s\n", st.Node, p.Addr, strings.TrimPrefix(st.State, "State"),
			st.Leader, st.Term, st.Commit, st.Applied, match[p.Node], live, st.RangeGroups, st.Quiesced, note)
	}
	tw.Flush()
	if len(ranges) > 0 {
		slices.SortFunc(ranges, func(a, b cluster.RangeStatus) int {
			return cmp.Or(cmp.Compare(a.Account, b.Account), cmp.Compare(a.Table, b.Table), cmp.Compare(a.StartPartitionKey, b.StartPartitionKey))
		})
		fmt.Fprintln(stdout)
		tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "table\tstart\tend\tentities\tbytes\treads/s\twrites/s\tgroup\treplicas\tmembers\tleaseholder")
		for _, r := range ranges {
			// The members differ from the replicas named while the group
			// moves; learners (catching up) are marked with a +.
			members := nodeList(r.Members)
			if len(r.Learners) > 0 {
				members += ",+" + strings.ReplaceAll(nodeList(r.Learners), ",", ",+")
			}
			fmt.Fprintf(tw, "%s/%s\t%q\t%q\t%d\t%d\t%.1f\t%.1f\t%d\t%s\t%s\t%d\n", r.Account, r.Table, r.StartPartitionKey, r.EndPartitionKey,
				r.Entities, r.Bytes, r.ReadsPerSecond, r.WritesPerSecond, r.Group, nodeList(r.Replicas), members, r.Leaseholder)
		}
		tw.Flush()
	}
	return 0
}

// fetchStatus reads a node's status; id is the node's id, or 0 for
// whichever node answers at addr.
func fetchStatus(addr string, id uint64, secret []byte) (cluster.Status, error) {
	var st cluster.Status
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/cluster/status", nil)
	transport.Sign(req, secret, "status", 0, id, time.Now())
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

func nodeList(ids []uint64) string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(out, ",")
}

// decommission removes a node from the cluster: any node's internal
// address takes the request; the leader carries it out (handing its
// leadership over first when it is the one removed). First the node is
// drained: the system group's leader moves every range group's member it
// holds to other nodes, and the command waits until no group names it
// and, if it answers, it hosts none, so that no table loses a copy. Then
// it is removed: it stops, and its data directory is marked so it does
// not come back.
func decommission(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("cluster decommission", "usage: tabula cluster decommission --node HOST:PORT --id N [--drain-timeout D] [--cluster-secret S]", stderr)
	nodeAddr := fs.String("node", "", "the internal address of any node")
	id := fs.Uint64("id", 0, "the id of the node to remove (tabula cluster status lists them)")
	drainTimeout := fs.Duration("drain-timeout", 30*time.Minute, "how long to wait for the node's range groups to move off it")
	secretFlag := fs.String("cluster-secret", "", "the cluster secret (default $"+secretEnv+")")
	if !parseArgs(fs, args, 0) {
		return 2
	}
	secret := operatorSecret(*secretFlag)
	if *nodeAddr == "" || *id == 0 || len(secret) == 0 {
		fmt.Fprintln(stderr, "tabula cluster decommission: --node, --id and the cluster secret are needed")
		return 2
	}
	if _, err := askCluster(http.MethodPost, *nodeAddr, fmt.Sprintf("/cluster/members?drain=%d", *id), "member", secret); err != nil {
		fmt.Fprintf(stderr, "tabula cluster decommission: drain node %d: %v\n", *id, err)
		return 1
	}
	if err := waitDrained(*nodeAddr, *id, secret, *drainTimeout); err != nil {
		fmt.Fprintf(stderr, "tabula cluster decommission: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "node %d drained of its range groups\n", *id)
	if _, err := askCluster(http.MethodDelete, *nodeAddr, fmt.Sprintf("/cluster/members?id=%d", *id), "member", secret); err != nil {
		fmt.Fprintf(stderr, "tabula cluster decommission: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "node %d removed from the cluster\n", *id)
	return 0
}

// systemGroup is the id `cluster status` gives the system group.
const systemGroup = 1

// waitDrained waits until no range of any table names node id among its
// range group's replicas or members, as their leaseholders report them,
// and the node, if it answers, hosts no range group.
func waitDrained(addr string, id uint64, secret []byte, timeout time.Duration) error {
	last := "no status yet"
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		first, err := fetchStatus(addr, 0, secret)
		if err != nil {
			last = err.Error()
			continue
		}
		holding, hosts := 0, -1
		for _, p := range first.Peers {
			st := first
			if p.Node != first.Node {
				if st, err = fetchStatus(p.Addr, p.Node, secret); err != nil {
					continue // a node down holds no lease; the drained one may be down
				}
			}
			if p.Node == id {
				hosts = st.RangeGroups
			}
			for _, r := range st.Ranges {
				if r.Group == systemGroup {
					continue // the system group's: the removal itself moves it
				}
				if slices.Contains(r.Replicas, id) || slices.Contains(r.Members, id) || slices.Contains(r.Learners, id) {
					holding++
				}
			}
		}
		if holding == 0 && hosts <= 0 {
			return nil
		}
		last = fmt.Sprintf("%d ranges still name node %d; it hosts %d range groups", holding, id, hosts)
	}
	return fmt.Errorf("node %d was not drained in %v: %s", id, timeout, last)
}

// moveTable names the nodes a table's range group is to have as voters;
// the group's leader then moves its members there. It waits until the
// table's leaseholder reports them as the group's members.
func moveTable(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("cluster move", "usage: tabula cluster move --node HOST:PORT --table NAME --voters N,N,N [--at PARTITIONKEY] [--account A] [--cluster-secret S]", stderr)
	nodeAddr := fs.String("node", "", "the internal address of any node")
	table := fs.String("table", "", "the table whose range group moves")
	account := fs.String("account", auth.DevAccountName, "the table's account")
	votersFlag := fs.String("voters", "", "the ids of the nodes to hold the group's voters, comma-separated (tabula cluster status lists them)")
	at := fs.String("at", "", "of a split table, the range that holds this PartitionKey (default: the first)")
	timeout := fs.Duration("timeout", 10*time.Minute, "how long to wait for the members to move")
	secretFlag := fs.String("cluster-secret", "", "the cluster secret (default $"+secretEnv+")")
	if !parseArgs(fs, args, 0) {
		return 2
	}
	secret := operatorSecret(*secretFlag)
	var voters []uint64
	for _, f := range strings.Split(*votersFlag, ",") {
		v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		if err != nil || v == 0 {
			fmt.Fprintf(stderr, "tabula cluster move: --voters %q: node ids, comma-separated\n", *votersFlag)
			return 2
		}
		voters = append(voters, v)
	}
	if *nodeAddr == "" || *table == "" || len(secret) == 0 {
		fmt.Fprintln(stderr, "tabula cluster move: --node, --table, --voters and the cluster secret are needed")
		return 2
	}
	q := url.Values{"account": {*account}, "table": {*table}, "voters": {nodeList(voters)}, "at": {*at}}
	body, err := askCluster(http.MethodPost, *nodeAddr, "/cluster/placement?"+q.Encode(), "placement", secret)
	if err != nil {
		fmt.Fprintf(stderr, "tabula cluster move: %v\n", err)
		return 1
	}
	var named struct{ Group uint64 }
	json.Unmarshal(body, &named)
	want := slices.Sorted(slices.Values(voters))
	for deadline := time.Now().Add(*timeout); ; time.Sleep(250 * time.Millisecond) {
		if r, ok := groupRange(*nodeAddr, named.Group, secret); ok && len(r.Learners) == 0 &&
			slices.Equal(slices.Sorted(slices.Values(r.Members)), want) {
			fmt.Fprintf(stdout, "the range group of %s/%s is on nodes %s\n", *account, *table, nodeList(want))
			return 0
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(stderr, "tabula cluster move: the group did not reach nodes %s in %v\n", nodeList(want), *timeout)
			return 1
		}
	}
}

// reshapeTable splits the range of a table that holds a PartitionKey at
// it (kind "split": the keys from it on get a range, and a range group,
// of their own, on the same nodes), or merges the range that starts
// there into the one before it (kind "merge"). It waits until the
// leaseholders report the new ranges.
func reshapeTable(kind string, args []string, stdout, stderr io.Writer) int {
	usage := "usage: tabula cluster " + kind + " --node HOST:PORT --table NAME --at PARTITIONKEY [--account A] [--cluster-secret S]"
	fs := newFlags("cluster "+kind, usage, stderr)
	nodeAddr := fs.String("node", "", "the internal address of any node")
	table := fs.String("table", "", "the table whose range "+kind+"s")
	account := fs.String("account", auth.DevAccountName, "the table's account")
	at := fs.String("at", "", "the PartitionKey the range to "+kind+" starts at")
	timeout := fs.Duration("timeout", time.Minute, "how long to wait for the leaseholders to report it")
	secretFlag := fs.String("cluster-secret", "", "the cluster secret (default $"+secretEnv+")")
	if !parseArgs(fs, args, 0) {
		return 2
	}
	secret := operatorSecret(*secretFlag)
	if *nodeAddr == "" || *table == "" || *at == "" || len(secret) == 0 {
		fmt.Fprintf(stderr, "tabula cluster %s: --node, --table, --at and the cluster secret are needed\n", kind)
		return 2
	}
	q := url.Values{"account": {*account}, "table": {*table}, "at": {*at}}
	if _, err := askCluster(http.MethodPost, *nodeAddr, "/cluster/"+kind+"?"+q.Encode(), "placement", secret); err != nil {
		fmt.Fprintf(stderr, "tabula cluster %s: %v\n", kind, err)
		return 1
	}
	for deadline := time.Now().Add(*timeout); ; time.Sleep(250 * time.Millisecond) {
		switch r, ok := tableRangeAt(*nodeAddr, *account, *table, *at, secret); {
		case kind == "split" && ok:
			fmt.Fprintf(stdout, "%s/%s splits at %q: range group %d on nodes %s\n", *account, *table, *at, r.Group, nodeList(r.Members))
			return 0
		case kind == "merge" && !ok:
			if r, ok := tableRangeHolding(*nodeAddr, *account, *table, *at, secret); ok {
				fmt.Fprintf(stdout, "%s/%s merges at %q: range group %d on nodes %s holds [%q, %q)\n", *account, *table, *at, r.Group,
					nodeList(r.Members), r.StartPartitionKey, r.EndPartitionKey)
				return 0
			}
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(stderr, "tabula cluster %s: the leaseholders do not report the %s of %s at %q after %v\n", kind, kind, *table, *at, *timeout)
			return 1
		}
	}
}

// groupRange returns the range of range group group, as its leaseholder
// reports it.
func groupRange(addr string, group uint64, secret []byte) (cluster.RangeStatus, bool) {
	return findRange(addr, secret, func(r cluster.RangeStatus) bool { return r.Group == group })
}

// tableRangeAt returns the range of a table that starts at PartitionKey
// start, as its leaseholder reports it.
func tableRangeAt(addr, account, table, start string, secret []byte) (cluster.RangeStatus, bool) {
	return findRange(addr, secret, func(r cluster.RangeStatus) bool {
		return r.Account == account && strings.EqualFold(r.Table, table) && r.StartPartitionKey == start
	})
}

// tableRangeHolding returns the range of a table that holds PartitionKey
// pk, as its leaseholder reports it.
func tableRangeHolding(addr, account, table, pk string, secret []byte) (cluster.RangeStatus, bool) {
	return findRange(addr, secret, func(r cluster.RangeStatus) bool {
		return r.Account == account && strings.EqualFold(r.Table, table) && r.StartPartitionKey <= pk &&
			(r.EndPartitionKey == "" || pk < r.EndPartitionKey)
	})
}

// findRange returns the first range a leaseholder reports that match
// says is the one.
func findRange(addr string, secret []byte, match func(cluster.RangeStatus) bool) (cluster.RangeStatus, bool) {
	first, err := fetchStatus(addr, 0, secret)
	if err != nil {
		return cluster.RangeStatus{}, false
	}
	for _, p := range first.Peers {
		st := first
		if p.Node != first.Node {
			if st, err = fetchStatus(p.Addr, p.Node, secret); err != nil {
				continue
			}
		}
		for _, r := range st.Ranges {
			if match(r) {
				return r, true
			}
		}
	}
	return cluster.RangeStatus{}, false
}

// transferLease moves a table's lease (the leadership of its range
// group) to another of the group's voters.
func transferLease(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("cluster transfer-lease", "usage: tabula cluster transfer-lease --node HOST:PORT --table NAME --to N [--at PARTITIONKEY] [--account A] [--cluster-secret S]", stderr)
	nodeAddr := fs.String("node", "", "the internal address of any node")
	table := fs.String("table", "", "the table whose lease moves")
	account := fs.String("account", auth.DevAccountName, "the table's account")
	to := fs.Uint64("to", 0, "the id of the node to hold the lease, a voter of the table's range group (tabula cluster status lists them)")
	at := fs.String("at", "", "of a split table, the range that holds this PartitionKey (default: the first)")
	secretFlag := fs.String("cluster-secret", "", "the cluster secret (default $"+secretEnv+")")
	if !parseArgs(fs, args, 0) {
		return 2
	}
	secret := operatorSecret(*secretFlag)
	if *nodeAddr == "" || *table == "" || *to == 0 || len(secret) == 0 {
		fmt.Fprintln(stderr, "tabula cluster transfer-lease: --node, --table, --to and the cluster secret are needed")
		return 2
	}
	q := url.Values{"account": {*account}, "table": {*table}, "to": {strconv.FormatUint(*to, 10)}, "at": {*at}}
	if _, err := askCluster(http.MethodPost, *nodeAddr, "/cluster/lease?"+q.Encode(), "lease", secret); err != nil {
		fmt.Fprintf(stderr, "tabula cluster transfer-lease: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "the lease of %s/%s is with node %d\n", *account, *table, *to)
	return 0
}

// askCluster sends an operator's request to a node's internal address,
// signed for purpose, and follows the node another names
// (X-Tabula-Leader) while the answer is 503 or the node cannot be
// reached, for up to a minute. A 4xx answer is final.
func askCluster(method, addr, path, purpose string, secret []byte) ([]byte, error) {
	client := &http.Client{Timeout: 35 * time.Second}
	last := "no answer"
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		req, _ := http.NewRequest(method, "http://"+addr+path, nil)
		transport.Sign(req, secret, purpose, 0, 0, time.Now())
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			time.Sleep(250 * time.Millisecond)
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			return body, nil
		case resp.StatusCode >= 400 && resp.StatusCode < 500:
			return nil, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
		}
		if l := resp.Header.Get("X-Tabula-Leader"); l != "" {
			addr = l
		}
		last = fmt.Sprintf("%s: %s", resp.Status, bytes.TrimSpace(body))
		time.Sleep(250 * time.Millisecond)
	}
	return nil, errors.New(last)
}
