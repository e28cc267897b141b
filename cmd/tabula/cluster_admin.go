package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tabuladb/tabula/cluster"
	"github.com/tabuladb/tabula/cluster/transport"
	"github.com/tabuladb/tabula/server/auth"
)

// operatorSecret is the cluster secret an operator's command signs with:
// --cluster-secret, or $TABULA_CLUSTER_SECRET.
func operatorSecret(flagValue string) []byte {
	if flagValue != "" {
		return []byte(flagValue)
	}
	return []byte(os.Getenv(secretEnv))
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
	fmt.Fprintln(tw, "node\taddr\tstate\tleader\tterm\tcommit\tapplied\tmatch\tlive\tgroups\tquiet\tdormant\tunloaded\tnote")
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
			fmt.Fprintf(tw, "%d\t%s\tunreachable\t\t\t\t\t%d\t%s\t\t\t\t\t%s\n", p.Node, p.Addr, match[p.Node], live, strings.Join(notes, "; "))
			continue
		}
		if st.Failed != "" {
			notes = append(notes, st.Failed)
		}
		note := strings.Join(notes, "; ")
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%s\n", st.Node, p.Addr, strings.TrimPrefix(st.State, "State"),
			st.Leader, st.Term, st.Commit, st.Applied, match[p.Node], live, st.RangeGroups, st.Quiesced, st.Dormant, st.Unloaded, note)
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
