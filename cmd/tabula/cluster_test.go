package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/tabuladb/tabula/cluster/netproxy"
)

const testSecret = "a-cluster-secret-for-tests"

// freeAddrs returns n loopback addresses nothing listens on now.
//
// The ports are drawn below Linux's ephemeral range (32768 and up), which
// a listener on port 0 and every outgoing connection draw from: the
// processes bind them after this closes its listeners, and a port of that
// range could be taken meanwhile by a test running in parallel (it
// happened: "address already in use"). Below it, only another draw like
// this one could take it.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var lns []net.Listener
	for tries := 0; len(out) < n; tries++ {
		if tries == 1000 {
			t.Fatal("no free port below the ephemeral range in 1000 draws")
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12000)))
		if err != nil {
			continue // taken
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

// procCluster is a cluster of `tabula serve` processes on loopback.
type procCluster struct {
	t         *testing.T
	join      string
	nodeAddrs []string
	restAddrs []string
	dirs      []string
	procs     []*serverProcess
	extra     []string // more flags for every node
}

func startProcCluster(t *testing.T, size int, extra ...string) *procCluster {
	t.Helper()
	addrs := freeAddrs(t, 2*size)
	c := &procCluster{t: t, nodeAddrs: addrs[:size:size], restAddrs: addrs[size:], procs: make([]*serverProcess, size), extra: extra}
	c.join = strings.Join(c.nodeAddrs, ",")
	root := t.TempDir()
	for i := range size {
		c.dirs = append(c.dirs, filepath.Join(root, fmt.Sprintf("n%d", i+1)))
	}
	for i := range size {
		c.start(i, testSecret)
	}
	return c
}

func (c *procCluster) args(i int, secret string) []string {
	// A short raft log: a node that misses a few dozen writes catches
	// up by snapshot.
	return append([]string{"--addr", c.restAddrs[i], "--data", c.dirs[i], "--node-addr", c.nodeAddrs[i], "--join", c.join,
		"--cluster-secret", secret, "--raft-log-keep", "10", "--raft-sync-every", "20"}, c.extra...)
}

func (c *procCluster) start(i int, secret string) {
	c.t.Helper()
	c.procs[i] = startServe(c.t, c.args(i, secret)...)
}

// client is an SDK table client that reaches the cluster through node i,
// retrying as the SDK does by default (503s while a leader is elected).
func (c *procCluster) client(i int, table string) *aztables.Client {
	c.t.Helper()
	return c.clientWith(i, table, policy.RetryOptions{
		MaxRetries: 10, RetryDelay: 100 * time.Millisecond, MaxRetryDelay: time.Second, TryTimeout: 15 * time.Second})
}

// clientWith is an SDK table client through node i that retries as retry
// says.
func (c *procCluster) clientWith(i int, table string, retry policy.RetryOptions) *aztables.Client {
	c.t.Helper()
	conn := fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=%s;TableEndpoint=http://%s/devstoreaccount1;",
		"Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==", c.restAddrs[i])
	opts := &aztables.ClientOptions{ClientOptions: policy.ClientOptions{Retry: retry}}
	svc, err := aztables.NewServiceClientFromConnectionString(conn, opts)
	if err != nil {
		c.t.Fatal(err)
	}
	return svc.NewClient(table)
}

// leader finds the node that leads, by asking each for its status.
func (c *procCluster) leader() int {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for i, a := range c.nodeAddrs {
			if c.procs[i] == nil {
				continue
			}
			if st, err := fetchStatus(a, uint64(i+1), []byte(testSecret)); err == nil && st.Ready {
				return i
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatal("no ready leader in 20 s")
	return -1
}

// TestClusterOfProcesses runs three real nodes: the SDK writes through
// one node and reads through the others (each forwards to the leader);
// the leader is killed with SIGKILL under the writes and the survivors
// carry on; the killed node restarts and catches up; nothing acknowledged
// is lost. The table's entities are in the system group
// (--range-groups=false), which catches the node up with a snapshot of
// the whole store; TestClusterRangeGroups is its range groups' twin.
func TestClusterOfProcesses(t *testing.T) {
	c := startProcCluster(t, 3, "--range-groups=false")
	ctx := context.Background()
	leader := c.leader()
	follower := (leader + 1) % 3
	w := c.client(follower, "clustered")
	if _, err := w.CreateTable(ctx, nil); err != nil {
		t.Fatal(err)
	}
	acked := map[string]bool{}
	write := func(cl *aztables.Client, i int) {
		rk := fmt.Sprintf("r%04d", i)
		if _, err := cl.AddEntity(ctx, entityJSON("p", rk, i), nil); err != nil {
			var re *azcore.ResponseError
			if errors.As(err, &re) && re.ErrorCode == "EntityAlreadyExists" {
				acked[rk] = true // a retried insert whose first try had landed
				return
			}
			t.Fatalf("insert %d: %v", i, err)
		}
		acked[rk] = true
	}
	for i := range 40 {
		write(w, i)
	}
	// Every node answers reads, whichever leads.
	for i := range 3 {
		n := 0
		pager := c.client(i, "clustered").NewListEntitiesPager(nil)
		for pager.More() {
			page, err := pager.NextPage(ctx)
			if err != nil {
				t.Fatalf("query through node %d: %v", i+1, err)
			}
			n += len(page.Entities)
		}
		if n != 40 {
			t.Fatalf("query through node %d: %d entities, want 40", i+1, n)
		}
	}

	// SIGKILL the leader; a survivor takes the writes.
	c.procs[leader].cmd.Process.Signal(syscall.SIGKILL)
	<-c.procs[leader].exited
	c.procs[leader] = nil
	survivor := c.client((leader+2)%3, "clustered")
	for i := 40; i < 80; i++ {
		write(survivor, i)
	}
	newLeader := c.leader()
	if newLeader == leader {
		t.Fatal("the killed node leads")
	}

	// The killed node restarts from its disk and catches up.
	c.start(leader, testSecret)
	for i := 80; i < 100; i++ {
		write(c.client(leader, "clustered"), i)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := fetchStatus(c.nodeAddrs[leader], uint64(leader+1), []byte(testSecret))
		ld, lerr := fetchStatus(c.nodeAddrs[c.leader()], 0, []byte(testSecret))
		if err == nil && lerr == nil && st.Applied >= ld.Applied {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted node did not catch up: %+v / %+v (%v, %v)", st, ld, err, lerr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for rk := range acked {
		if _, err := c.client(leader, "clustered").GetEntity(ctx, "p", rk, nil); err != nil {
			t.Fatalf("acknowledged %s: %v", rk, err)
		}
	}
	if st, err := fetchStatus(c.nodeAddrs[leader], uint64(leader+1), []byte(testSecret)); err != nil || st.SnapshotsInstalled == 0 {
		t.Errorf("the restarted node, 40 writes behind a log of 10, caught up without a snapshot: %+v, %v", st, err)
	}

	// `tabula cluster status` names the three nodes and one leader.
	var out, errOut bytes.Buffer
	if code := run([]string{"cluster", "status", "--node", c.nodeAddrs[0], "--cluster-secret", testSecret}, &out, &errOut); code != 0 {
		t.Fatalf("cluster status: %d %s", code, errOut.String())
	}
	if got := strings.Count(out.String(), "Leader"); got != 1 || strings.Count(out.String(), "Follower") != 2 {
		t.Errorf("cluster status:\n%s", out.String())
	}
	// Every node hears from the two others (their liveness messages), the
	// restarted one too once its streams are up again.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if got := len(regexp.MustCompile(`\s2/2\s`).FindAllString(out.String(), -1)); got == 3 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("cluster status shows %d nodes live to both others, want 3:\n%s", got, out.String())
		}
		out.Reset()
		if code := run([]string{"cluster", "status", "--node", c.nodeAddrs[0], "--cluster-secret", testSecret}, &out, &errOut); code != 0 {
			t.Fatalf("cluster status: %d %s", code, errOut.String())
		}
	}
	// And the table's one range, on all three replicas, its lease with
	// the leader, holding what was written.
	st, err := fetchStatus(c.nodeAddrs[c.leader()], 0, []byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Ranges) != 1 || st.Ranges[0].Table != "clustered" || st.Ranges[0].Leaseholder != st.Node || st.Ranges[0].Entities < 40 {
		t.Errorf("ranges: %+v", st.Ranges)
	}
	if !regexp.MustCompile(`devstoreaccount1/clustered\s+""\s+""\s+\d+\s+\d+\s+[0-9.]+\s+[0-9.]+\s+1\s+1,2,3\s+[123]`).MatchString(out.String()) {
		t.Errorf("cluster status lacks the range line:\n%s", out.String())
	}
}

// TestClusterRefusals: a node with the wrong secret is refused by its
// peers and stops at once; a data directory of another cluster (another
// --join list) or of a single node is refused; a second node on a taken
// address fails to start.
func TestClusterRefusals(t *testing.T) {
	c := startProcCluster(t, 3)
	c.leader()
	c.procs[2].cmd.Process.Signal(syscall.SIGKILL)
	<-c.procs[2].exited

	if _, err := spawnServe(c.args(2, "not-the-cluster-secret-at-all")...); err == nil || !strings.Contains(err.Error(), "secret") {
		t.Errorf("wrong secret: %v", err)
	}
	other := append([]string(nil), c.args(2, testSecret)...)
	other[7] = c.nodeAddrs[2] + "," + c.nodeAddrs[0] + "," + c.nodeAddrs[1] // --join, reordered
	if _, err := spawnServe(other...); err == nil || !strings.Contains(err.Error(), "belongs to another cluster") {
		t.Errorf("another cluster's directory: %v", err)
	}
	single := t.TempDir()
	p := startServe(t, "--addr", "127.0.0.1:0", "--data", single)
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(t)
	args := c.args(2, testSecret)
	args[3] = single // --data
	if _, err := spawnServe(args...); err == nil || !strings.Contains(err.Error(), "single-node store") {
		t.Errorf("a single node's directory: %v", err)
	}
	// Node 1's internal address is taken by node 1.
	taken := c.args(0, testSecret)
	taken[1] = "127.0.0.1:0"
	taken[3] = t.TempDir()
	if _, err := spawnServe(taken...); err == nil || !strings.Contains(err.Error(), "--node-addr") {
		t.Errorf("a taken address: %v", err)
	}
	// The right secret and directory start and rejoin.
	c.start(2, testSecret)
	if _, err := http.Get("http://" + c.restAddrs[2] + "/devstoreaccount1/Tables"); err != nil {
		t.Errorf("the rejoined node: %v", err)
	}
}

// TestClusterPartition cuts the leader off from the others through
// userspace proxies (every node reaches every other through one of its
// own): the majority elects a new leader and takes writes; the cut-off
// node acknowledges none, and answers no stale read; once healed it
// catches up and serves the majority's writes.
func TestClusterPartition(t *testing.T) {
	addrs := freeAddrs(t, 6)
	c := &procCluster{t: t, nodeAddrs: addrs[:3], restAddrs: addrs[3:], procs: make([]*serverProcess, 3)}
	c.join = strings.Join(c.nodeAddrs, ",")
	links := map[[2]int]*netproxy.Proxy{} // links[{from, to}]
	for i := range 3 {
		for j := range 3 {
			if i != j {
				p, err := netproxy.New("127.0.0.1:0", c.nodeAddrs[j])
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { p.Close() })
				links[[2]int{i, j}] = p
			}
		}
	}
	root := t.TempDir()
	for i := range 3 {
		c.dirs = append(c.dirs, filepath.Join(root, fmt.Sprintf("n%d", i+1)))
		args := c.args(i, testSecret)
		for j := range 3 {
			if i != j {
				args = append(args, "--peer", fmt.Sprintf("%d=%s", j+1, links[[2]int{i, j}].Addr()))
			}
		}
		c.procs[i] = startServe(t, args...)
	}
	ctx := context.Background()
	leader := c.leader()
	if _, err := c.client(leader, "split").CreateTable(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.client(leader, "split").AddEntity(ctx, entityJSON("p", "before", 1), nil); err != nil {
		t.Fatal(err)
	}

	for k, p := range links {
		if k[0] == leader || k[1] == leader {
			p.Cut()
		}
	}
	// The cut-off node takes no write: none is acknowledged.
	noRetry := func(i int) *aztables.Client {
		conn := fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=%s;TableEndpoint=http://%s/devstoreaccount1;",
			"Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==", c.restAddrs[i])
		svc, err := aztables.NewServiceClientFromConnectionString(conn, &aztables.ClientOptions{ClientOptions: policy.ClientOptions{
			Retry: policy.RetryOptions{MaxRetries: -1, TryTimeout: 3 * time.Second}}})
		if err != nil {
			t.Fatal(err)
		}
		return svc.NewClient("split")
	}
	minority := noRetry(leader)
	if _, err := minority.AddEntity(ctx, entityJSON("p", "minority", 1), nil); err == nil {
		t.Fatal("the cut-off node acknowledged a write")
	}
	// The majority elects a leader of its own and takes writes.
	majority := c.client((leader+1)%3, "split")
	for i := range 10 {
		if _, err := majority.AddEntity(ctx, entityJSON("p", fmt.Sprintf("m%02d", i), i), nil); err != nil {
			t.Fatalf("majority write %d: %v", i, err)
		}
	}
	// The cut-off node now serves no read of the old state.
	if _, err := minority.GetEntity(ctx, "p", "before", nil); err == nil {
		t.Fatal("the cut-off node answered a read")
	}

	for _, p := range links {
		p.Heal()
	}
	healed := c.client(leader, "split")
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := healed.GetEntity(ctx, "p", "m09", nil)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after healing, the majority's writes through the old leader: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := healed.GetEntity(ctx, "p", "minority", nil); err == nil {
		t.Error("the write the cut-off node never acknowledged was applied")
	}
}

// TestClusterGrowAndShrink adds a fourth node to a running cluster (it
// joins through a founder, catches up and serves) and decommissions a
// founder with `tabula cluster decommission` (it stops, and its directory
// refuses to start again); the three left keep taking writes with one of
// them down.
func TestClusterGrowAndShrink(t *testing.T) {
	c := startProcCluster(t, 3)
	ctx := context.Background()
	c.leader()
	w := c.client(0, "grow")
	if _, err := w.CreateTable(ctx, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := w.AddEntity(ctx, entityJSON("p", fmt.Sprintf("r%03d", i), i), nil); err != nil {
			t.Fatal(err)
		}
	}
	extra := freeAddrs(t, 2)
	c.nodeAddrs = append(c.nodeAddrs, extra[0])
	c.restAddrs = append(c.restAddrs, extra[1])
	c.dirs = append(c.dirs, filepath.Join(t.TempDir(), "n4"))
	c.procs = append(c.procs, nil)
	c.start(3, testSecret) // --node-addr not in --join: a new member
	fourth := c.client(3, "grow")
	if _, err := fourth.AddEntity(ctx, entityJSON("p", "via-4", 1), nil); err != nil {
		t.Fatalf("a write through the new node: %v\n%s", err, c.procs[3].stderr)
	}
	if _, err := fourth.GetEntity(ctx, "p", "r049", nil); err != nil {
		t.Fatalf("a read through the new node: %v", err)
	}
	var out, errOut bytes.Buffer
	deadline := time.Now().Add(20 * time.Second)
	for {
		out.Reset()
		run([]string{"cluster", "status", "--node", c.nodeAddrs[3], "--cluster-secret", testSecret}, &out, &errOut)
		if strings.Count(out.String(), "Follower")+strings.Count(out.String(), "Leader") == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("four members never all followed a leader:\n%s\n%s", out.String(), errOut.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	out.Reset()
	if code := run([]string{"cluster", "decommission", "--node", c.nodeAddrs[2], "--id", "1", "--cluster-secret", testSecret}, &out, &errOut); code != 0 {
		t.Fatalf("decommission: %d %s", code, errOut.String())
	}
	if code := c.procs[0].wait(t); code != 0 {
		t.Fatalf("the removed node exited %d: %s", code, c.procs[0].stderr)
	}
	if !strings.Contains(c.procs[0].stderr.String(), "removed this node") {
		t.Errorf("the removed node's log: %s", c.procs[0].stderr)
	}
	c.procs[0] = nil
	if _, err := spawnServe(c.args(0, testSecret)...); err == nil || !strings.Contains(err.Error(), "removed") {
		t.Errorf("the removed node's directory started again: %v", err)
	}
	// Voters 2, 3 and 4: with one more down, two still make a quorum.
	c.procs[1].cmd.Process.Signal(syscall.SIGKILL)
	<-c.procs[1].exited
	c.procs[1] = nil
	for i := range 5 {
		if _, err := c.client(2, "grow").AddEntity(ctx, entityJSON("p", fmt.Sprintf("after%d", i), i), nil); err != nil {
			t.Fatalf("a write with one of three down: %v", err)
		}
	}
}

// TestClusterRollingRestart restarts each of five nodes in turn, with
// SIGTERM, while a client keeps writing through whichever node is up:
// every write acknowledged is there at the end, read through each node.
// It runs with the table in the system group, and in a range group of its
// own.
func TestClusterRollingRestart(t *testing.T) {
	for _, ranges := range []bool{false, true} {
		t.Run(fmt.Sprintf("range-groups=%v", ranges), func(t *testing.T) {
			// With range groups, the table's group has three voters of
			// the five nodes: two nodes answer for it by forwarding to a
			// voter.
			rollingRestart(t, startProcCluster(t, 5, fmt.Sprintf("--range-groups=%v", ranges)))
		})
	}
}

func rollingRestart(t *testing.T, c *procCluster) {
	ctx := context.Background()
	c.leader()
	if _, err := c.client(0, "rolling").CreateTable(ctx, nil); err != nil {
		t.Fatal(err)
	}
	var (
		mu         sync.Mutex
		acked      []string
		stop       = make(chan struct{})
		done       = make(chan struct{})
		restarting atomic.Int32 // the node going down, or -1
	)
	restarting.Store(-1)
	ackedCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			rk := fmt.Sprintf("r%05d", i)
			// Through every node in turn but the one restarting (a
			// write to a node going down may fail, and its client's
			// retries would hold the writer up).
			node := i % 5
			if node == int(restarting.Load()) {
				node = (node + 1) % 5
			}
			if _, err := c.client(node, "rolling").AddEntity(ctx, entityJSON("p", rk, i), nil); err == nil {
				mu.Lock()
				acked = append(acked, rk)
				mu.Unlock()
			}
		}
	}()
	for i := range 5 {
		before := ackedCount()
		restarting.Store(int32(i))
		c.procs[i].cmd.Process.Signal(syscall.SIGTERM)
		if code := c.procs[i].wait(t); code != 0 {
			t.Fatalf("node %d exited %d: %s", i+1, code, c.procs[i].stderr)
		}
		c.start(i, testSecret)
		restarting.Store(-1)
		c.leader()
		// The cluster takes writes again before the next node goes.
		deadline := time.Now().Add(30 * time.Second)
		for ackedCount() < before+10 {
			if time.Now().After(deadline) {
				t.Fatalf("after node %d restarted, %d writes were acknowledged in 30 s", i+1, ackedCount()-before)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	close(stop)
	<-done
	mu.Lock()
	defer mu.Unlock()
	// A query through each node (thousands of point reads per node
	// took most of the test's time).
	for i := range 5 {
		keys, err := entityKeys(c.client(i, "rolling"), &aztables.ListEntitiesOptions{Select: to.Ptr("PartitionKey,RowKey")})
		if err != nil {
			t.Fatalf("query through node %d: %v", i+1, err)
		}
		found := map[string]bool{}
		for _, k := range keys {
			found[k] = true
		}
		for _, rk := range acked {
			if !found["p/"+rk] {
				t.Fatalf("acknowledged %s, not found through node %d (%d entities there)", rk, i+1, len(found))
			}
		}
	}
	if _, err := c.client(4, "rolling").GetEntity(ctx, "p", acked[len(acked)-1], nil); err != nil {
		t.Fatalf("acknowledged %s, read through node 5: %v", acked[len(acked)-1], err)
	}
	t.Logf("%d writes acknowledged across five restarts", len(acked))
}

// entityKeys lists the entities a query of cl's table finds with opts,
// as PartitionKey/RowKey in the order the pages brought them.
func entityKeys(cl *aztables.Client, opts *aztables.ListEntitiesOptions) ([]string, error) {
	var keys []string
	pager := cl.NewListEntitiesPager(opts)
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			return keys, err
		}
		for _, raw := range page.Entities {
			var e struct{ PartitionKey, RowKey string }
			if err := json.Unmarshal(raw, &e); err != nil {
				return keys, fmt.Errorf("entity %s: %w", raw, err)
			}
			keys = append(keys, e.PartitionKey+"/"+e.RowKey)
		}
	}
	return keys, nil
}
