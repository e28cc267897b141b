package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tabuladb/tabula/cluster"
	"github.com/tabuladb/tabula/cluster/transport"
)

// The REST suite's -cluster mode runs Tabula as a cluster of processes on
// this machine, system "cluster", beside the single node. Its figures sum
// the CPU and peak RSS of every node; the clients send each request to
// the node that answers for its table, as a front end that caches the
// partition map does: the leader, or with range groups the leaseholder
// of the table's group, which the nodes spread (any other node would
// forward the request there, one more hop). The failover
// runs kill -9 the leaseholder of the range being written under a write
// load and time the first write acknowledged after the kill, then
// restart the killed node and time its catch-up. (Not the system group's
// leader: with range groups, a kill that missed the range's leaseholder
// times only the writers' move to another node.)

// clusterSystem is the system name of a Tabula cluster.
const clusterSystem = "cluster"

// clusterBaseSystem is a cluster of the -base-bin binary, to measure a
// change to the cluster against the build before it in the same run.
const clusterBaseSystem = "cluster-base"

// clusterSecret is the benchmark clusters' shared secret.
const clusterSecret = "tabula-bench-cluster-secret"

// clusterAddrs are a cluster's addresses, kept in its folder so that a
// node restarted on its data listens where the others expect it.
type clusterAddrs struct {
	REST []string `json:"rest"`
	Node []string `json:"node"`
}

// clusterKind runs size `tabula serve` processes of binary as one cluster,
// node i's data in dir/n<i>.
func clusterKind(name, binary string, size int, extra []string) serverKind {
	return serverKind{name: name,
		launch: func(dir string) ([]*exec.Cmd, []string, error) {
			addrs, err := loadClusterAddrs(dir, size)
			if err != nil {
				return nil, nil, err
			}
			var cmds []*exec.Cmd
			for i := range size {
				args := []string{"serve", "--addr", addrs.REST[i], "--data", filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
					"--node-addr", addrs.Node[i], "--join", strings.Join(addrs.Node, ","), "--log-level", "error"}
				for _, a := range extra { // e.g. --pprof 127.0.0.1:606{node}: one port per node
					args = append(args, strings.ReplaceAll(a, "{node}", strconv.Itoa(i+1)))
				}
				cmd := exec.Command(binary, args...)
				cmd.Env = append(os.Environ(), "AZURITE_ACCOUNTS=", "TABULA_CLUSTER_SECRET="+clusterSecret)
				cmds = append(cmds, cmd)
			}
			return cmds, addrs.REST, nil
		},
		pick: func(s *server) (int, error) {
			addrs, err := loadClusterAddrs(s.dir, size)
			if err != nil {
				return 0, err
			}
			return waitLeader(addrs.Node, nil, 60*time.Second)
		},
		route: func(s *server, base http.RoundTripper) (http.RoundTripper, func()) {
			addrs, err := loadClusterAddrs(s.dir, size)
			if err != nil {
				return base, func() {}
			}
			lr := &leaseRoutes{base: base, addrs: addrs, hosts: map[string]string{}, stop: make(chan struct{})}
			go lr.refresh()
			return lr, func() { close(lr.stop) }
		},
	}
}

// benchTableHeader names the table of a request whose path does not (a
// batch's) for the cluster's routing; the service ignores it.
const benchTableHeader = "X-Bench-Table"

// leaseRoutes sends each request to the REST address of the node holding
// its table's lease, as the nodes' status pages last said (refreshed
// every 200 ms); a request for a table it does not know goes where the
// client sends it (the leader).
type leaseRoutes struct {
	base  http.RoundTripper
	addrs clusterAddrs
	stop  chan struct{}
	mu    sync.RWMutex
	hosts map[string]string // lower-case table name -> REST address
}

func (lr *leaseRoutes) RoundTrip(req *http.Request) (*http.Response, error) {
	table := req.Header.Get(benchTableHeader)
	if table == "" {
		// /account/table(...) or /account/table?...
		rest := strings.TrimPrefix(req.URL.Path, "/"+devAccount+"/")
		table = rest[:strings.IndexAny(rest+"(?/", "(?/")]
	}
	lr.mu.RLock()
	host := lr.hosts[strings.ToLower(table)]
	lr.mu.RUnlock()
	if host != "" && host != req.URL.Host {
		req = req.Clone(req.Context())
		req.URL.Host, req.Host = host, host
	}
	return lr.base.RoundTrip(req)
}

func (lr *leaseRoutes) refresh() {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		hosts := map[string]string{}
		for i, a := range lr.addrs.Node {
			st, err := nodeStatus(a, uint64(i+1))
			if err != nil {
				continue
			}
			for _, r := range st.Ranges {
				if r.Leaseholder >= 1 && int(r.Leaseholder) <= len(lr.addrs.REST) {
					hosts[strings.ToLower(r.Table)] = lr.addrs.REST[r.Leaseholder-1]
				}
			}
		}
		lr.mu.Lock()
		lr.hosts = hosts
		lr.mu.Unlock()
		select {
		case <-lr.stop:
			return
		case <-t.C:
		}
	}
}

// loadClusterAddrs reads dir's addresses, choosing free ones the first time.
func loadClusterAddrs(dir string, size int) (clusterAddrs, error) {
	path := filepath.Join(dir, "addresses.json")
	var a clusterAddrs
	if data, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(data, &a); err != nil || len(a.REST) != size || len(a.Node) != size {
			return a, fmt.Errorf("%s: not the addresses of %d nodes", path, size)
		}
		return a, nil
	}
	// Hold every listener until all are chosen, so no two are the same.
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for i := range 2 * size {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return a, err
		}
		lns = append(lns, ln)
		if i < size {
			a.REST = append(a.REST, ln.Addr().String())
		} else {
			a.Node = append(a.Node, ln.Addr().String())
		}
	}
	data, _ := json.Marshal(a)
	return a, os.WriteFile(path, data, 0o644)
}

// nodeStatus asks the node at addr (founder id) for its status.
func nodeStatus(addr string, id uint64) (cluster.Status, error) {
	var st cluster.Status
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/cluster/status?groups=1", nil)
	transport.Sign(req, []byte(clusterSecret), "status", 0, id, time.Now())
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status of %s: %s: %s", addr, resp.Status, body)
	}
	return st, json.Unmarshal(body, &st)
}

// waitNode returns the index of the first node, among those down does
// not mark, whose status satisfies is, asking every 20 ms for up to
// limit; what names the node sought in the error.
func waitNode(nodeAddrs []string, down []bool, limit time.Duration, what string, is func(cluster.Status) bool) (int, error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		for i, a := range nodeAddrs {
			if down != nil && down[i] {
				continue
			}
			if st, err := nodeStatus(a, uint64(i+1)); err == nil && is(st) {
				return i, nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, fmt.Errorf("no node of %s %s within %s", strings.Join(nodeAddrs, ","), what, limit)
}

// waitLeader returns the index of the node that leads and is ready to
// serve, skipping the nodes down marks.
func waitLeader(nodeAddrs []string, down []bool, limit time.Duration) (int, error) {
	return waitNode(nodeAddrs, down, limit, "led", func(st cluster.Status) bool { return st.Ready && st.Leader == st.Node })
}

// waitLeaseholder returns the index of the node that holds the lease of
// table's range (its range group's leader, or the system group's for a
// table without range groups). A node lists only the ranges it serves
// (cluster's ranges): of a range group, one whose lease it holds; of a
// table without one, as the system group's ready leader.
func waitLeaseholder(nodeAddrs []string, table string, limit time.Duration) (int, error) {
	return waitNode(nodeAddrs, nil, limit, "held the lease of table "+table, func(st cluster.Status) bool {
		return slices.ContainsFunc(st.Ranges, func(r cluster.RangeStatus) bool {
			return strings.EqualFold(r.Table, table) && r.Leaseholder == st.Node
		})
	})
}

// failoverRun is one kill -9 of a cluster's leaseholder under writes.
type failoverRun struct {
	Kill int `json:"kill"`
	// FailoverMS: from the kill to the first insert acknowledged that was
	// sent after it. CatchUpMS: from the killed node's restart until it
	// has applied everything committed when it started.
	FailoverMS float64 `json:"failover_ms"`
	CatchUpMS  float64 `json:"catch_up_ms"`
	Error      string  `json:"error,omitempty"`
}

// failoverReport is the failover test's result.
type failoverReport struct {
	Nodes int           `json:"nodes"`
	Kills []failoverRun `json:"kills"`
	// Acknowledged inserts over the whole test, and how many a read
	// through the cluster found afterwards.
	Acknowledged int    `json:"acknowledged"`
	Survived     int    `json:"survived"`
	Error        string `json:"error,omitempty"`
}

// clusterFailover starts a cluster of kind, keeps conns writers inserting
// into one range through every node, kills the range's leaseholder with
// SIGKILL kills times (restarting it each time) and checks every
// acknowledged insert.
func clusterFailover(kind serverKind, tmp string, nodes, kills, conns int) failoverReport {
	out := failoverReport{Nodes: nodes}
	fail := func(err error) failoverReport {
		out.Error = err.Error()
		return out
	}
	dir, err := os.MkdirTemp(tmp, "failover-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	srv, err := startServer(kind, dir)
	if err != nil {
		return fail(err)
	}
	defer srv.stop()
	addrs, err := loadClusterAddrs(dir, nodes)
	if err != nil {
		return fail(err)
	}
	clients := make([]*tableClient, nodes)
	for i, p := range srv.procs {
		clients[i] = newTableClient("http://"+p.addr+"/"+devAccount, conns)
	}
	if r, err := clients[0].do("POST", "/Tables", "application/json", []byte(`{"TableName":"failover"}`)); err != nil || !r.ok() {
		return fail(fmt.Errorf("create table: %v %d %s", err, r.status, r.body))
	}

	// Writers: each sends to the node after its last, so that a dead
	// node costs it one failed insert, not all of them.
	var (
		mu     sync.Mutex
		acks   []ack
		stop   atomic.Bool
		seq    atomic.Int64
		wg     sync.WaitGroup
		downMu sync.Mutex
		down   = make([]bool, nodes)
	)
	for w := range conns {
		wg.Go(func() {
			target := w % nodes
			for !stop.Load() {
				target = (target + 1) % nodes
				downMu.Lock()
				isDown := down[target]
				downMu.Unlock()
				if isDown {
					continue
				}
				key := fmt.Sprintf("r%09d", seq.Add(1))
				sent := time.Now()
				r, err := clients[target].do("POST", "/failover", "application/json", benchEntityJSON("p", key, 0), "Prefer", "return-no-content")
				if err == nil && r.ok() {
					answered := time.Now()
					mu.Lock()
					acks = append(acks, ack{key, sent, answered})
					mu.Unlock()
				}
			}
		})
	}
	// firstAckAfter waits for an insert sent after t to be acknowledged
	// and returns how long after t the first such acknowledgement came.
	// Such an insert was answered after t, so it is appended after every
	// ack there was at t: the scan starts there and never goes back.
	firstAckAfter := func(t time.Time, limit time.Duration) (time.Duration, error) {
		mu.Lock()
		next := len(acks)
		mu.Unlock()
		deadline := time.Now().Add(limit)
		for time.Now().Before(deadline) {
			mu.Lock()
			for ; next < len(acks); next++ {
				if a := acks[next]; a.sent.After(t) {
					mu.Unlock()
					return a.answered.Sub(t), nil
				}
			}
			mu.Unlock()
			time.Sleep(time.Millisecond)
		}
		return 0, fmt.Errorf("no insert acknowledged within %s of the kill", limit)
	}
	time.Sleep(time.Second) // the writers warm up
	for k := range kills {
		run := failoverRun{Kill: k + 1}
		leader, err := waitLeaseholder(addrs.Node, "failover", 30*time.Second)
		if err != nil {
			run.Error = err.Error()
			out.Kills = append(out.Kills, run)
			break
		}
		downMu.Lock()
		down[leader] = true
		downMu.Unlock()
		killed := time.Now()
		srv.procs[leader].kill()
		d, err := firstAckAfter(killed, 30*time.Second)
		run.FailoverMS = float64(d.Microseconds()) / 1000
		if err != nil {
			run.Error = err.Error()
		}
		// Restart the node and time its catch-up to what was committed
		// when it started.
		cmds, _, err := kind.launch(dir)
		if err == nil {
			restarted := time.Now()
			var target catchUpTarget
			if nl, err := waitLeader(addrs.Node, down, 30*time.Second); err == nil {
				target = committedNow(addrs.Node, down, nl)
			}
			var p *process
			if p, err = startProcess(kind.name, cmds[leader], srv.procs[leader].addr); err == nil {
				srv.procs[leader] = p
				err = waitApplied(addrs.Node[leader], uint64(leader+1), target, 60*time.Second)
				run.CatchUpMS = float64(time.Since(restarted).Microseconds()) / 1000
			}
		}
		if err != nil && run.Error == "" {
			run.Error = "restart: " + err.Error()
		}
		downMu.Lock()
		down[leader] = false
		downMu.Unlock()
		out.Kills = append(out.Kills, run)
		time.Sleep(500 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	out.Acknowledged = len(acks)
	for _, a := range acks {
		if r, err := clients[0].do("GET", entityPath("failover", "p", a.key), "", nil); err == nil && r.ok() {
			out.Survived++
		}
	}
	return out
}

// ack is an acknowledged insert of the failover test.
type ack struct {
	key            string
	sent, answered time.Time
}

// catchUpTarget is what a restarted node must apply to have caught up:
// the system group's commit index, and each range group's index as its
// leader had applied it, when the node started.
type catchUpTarget struct {
	system uint64
	groups map[uint64]uint64
}

// committedNow reads the catch-up target from the live nodes: the system
// group's from its leader sysLeader, each range group's from the node
// that leads it.
func committedNow(nodeAddrs []string, down []bool, sysLeader int) catchUpTarget {
	t := catchUpTarget{groups: map[uint64]uint64{}}
	for i, a := range nodeAddrs {
		if down[i] {
			continue
		}
		st, err := nodeStatus(a, uint64(i+1))
		if err != nil {
			continue
		}
		if i == sysLeader {
			t.system = st.Commit
		}
		for _, g := range st.Groups {
			if g.Leader == st.Node {
				t.groups[g.Group] = g.Applied
			}
		}
	}
	return t
}

// waitApplied waits until the node at addr has applied the target: the
// system group's, and every range group's that it hosts.
func waitApplied(addr string, id uint64, target catchUpTarget, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if st, err := nodeStatus(addr, id); err == nil && st.Applied >= target.system && target.system > 0 && groupsCaughtUp(st.Groups, target.groups) {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return errors.New("the restarted node did not catch up within " + limit.String())
}

func groupsCaughtUp(have []cluster.GroupStatus, want map[uint64]uint64) bool {
	for _, g := range have {
		if g.Applied < want[g.Group] {
			return false
		}
	}
	return true
}

// write adds the failover test's section to a report.
func (fo *failoverReport) write(b *strings.Builder) {
	if fo == nil {
		return
	}
	fmt.Fprintf(b, "\n### Cluster failover: kill -9 of the leaseholder under writes (%d nodes)\n\n", fo.Nodes)
	if fo.Error != "" {
		fmt.Fprintf(b, "Failed: %s\n", fo.Error)
		return
	}
	fmt.Fprintf(b, "Writers insert into one range (one PartitionKey) through every live node; each kill is of the node that holds the range's lease. Failover: from the kill to the first acknowledgement of an insert sent after it. Catch-up: from the killed node's restart until it has applied everything committed when it started (in the system group, and in each range group it hosts as that group's leader had applied it).\n\n")
	fmt.Fprintf(b, "| kill | failover ms | catch-up ms | error |\n|---:|---:|---:|---|\n")
	var fail, catch []float64
	for _, k := range fo.Kills {
		fmt.Fprintf(b, "| %d | %s | %s | %s |\n", k.Kill, fmtFloat(k.FailoverMS, 0), fmtFloat(k.CatchUpMS, 0), k.Error)
		if k.Error == "" {
			fail, catch = append(fail, k.FailoverMS), append(catch, k.CatchUpMS)
		}
	}
	if len(fail) > 0 {
		fmt.Fprintf(b, "\nFailover median %s ms, worst %s ms; catch-up median %s ms, worst %s ms.\n",
			fmtFloat(median(fail), 0), fmtFloat(slices.Max(fail), 0), fmtFloat(median(catch), 0), fmtFloat(slices.Max(catch), 0))
	}
	fmt.Fprintf(b, "\nAcknowledged inserts: %d; found afterwards: %d; lost: **%d**.\n", fo.Acknowledged, fo.Survived, fo.Acknowledged-fo.Survived)
}

// failures lists what went wrong in the failover test, for the suite's
// verdict: a lost acknowledged write above all.
func (fo *failoverReport) failures() []string {
	if fo == nil {
		return nil
	}
	var out []string
	if fo.Error != "" {
		out = append(out, "failover: "+fo.Error)
	}
	for _, k := range fo.Kills {
		if k.Error != "" {
			out = append(out, fmt.Sprintf("failover kill %d: %s", k.Kill, k.Error))
		}
	}
	if fo.Survived < fo.Acknowledged {
		out = append(out, fmt.Sprintf("failover: %d acknowledged inserts lost", fo.Acknowledged-fo.Survived))
	}
	return out
}
