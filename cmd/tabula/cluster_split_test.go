package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// TestClusterSplits runs three real nodes with range groups and splits a
// table's range with `tabula cluster split`: the Go SDK, unchanged, then
// reads every entity through every node, its pager following the
// continuation at the ranges' boundary; inserts, point reads and a batch
// reach the range that holds their key through any node; `cluster
// status` lists both ranges; the new range's leaseholder killed with
// SIGKILL under writes loses nothing acknowledged; and `tabula cluster
// merge` under writes gives the range back, nothing lost.
func TestClusterSplits(t *testing.T) {
	c := startProcCluster(t, 3, "--placement-interval", "0")
	ctx := context.Background()
	c.leader()
	if _, err := c.client(0, "halves").CreateTable(ctx, nil); err != nil {
		t.Fatal(err)
	}
	acked := map[string]int{}
	upsert := func(node int, pk string, n int) {
		t.Helper()
		if _, err := c.client(node, "halves").UpsertEntity(ctx, entityJSON(pk, "r", n), nil); err != nil {
			t.Fatalf("upsert %s through node %d: %v", pk, node+1, err)
		}
		acked[pk] = n
	}
	for i := range 60 {
		upsert(i%3, fmt.Sprintf("p%02d", i), i)
	}
	var out, errOut bytes.Buffer
	// A split point no PartitionKey could be is refused, nothing split.
	if code := run([]string{"cluster", "split", "--node", c.nodeAddrs[2], "--table", "halves", "--at", "p/30",
		"--cluster-secret", testSecret}, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), "PartitionKey") {
		t.Fatalf("cluster split at an invalid key: exit %d, %q %q", code, out.String(), errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := run([]string{"cluster", "split", "--node", c.nodeAddrs[2], "--table", "halves", "--at", "p30",
		"--cluster-secret", testSecret}, &out, &errOut); code != 0 {
		t.Fatalf("cluster split: %d %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), `splits at "p30"`) {
		t.Fatalf("cluster split said: %s", out.String())
	}
	for i := range 20 {
		upsert(i%3, fmt.Sprintf("p%02d", i*3), 100+i) // both ranges, through every node
	}
	// A batch in the new range, through a node.
	var actions []aztables.TransactionAction
	for i := range 5 {
		e, _ := json.Marshal(map[string]any{"PartitionKey": "p45", "RowKey": fmt.Sprintf("b%d", i), "N": i})
		actions = append(actions, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: e})
	}
	if _, err := c.client(1, "halves").SubmitTransaction(ctx, actions, nil); err != nil {
		t.Fatalf("a batch in the new range: %v", err)
	}
	check := func(when string) {
		t.Helper()
		for node, p := range c.procs {
			if p == nil {
				continue
			}
			for pk, n := range acked {
				resp, err := c.client(node, "halves").GetEntity(ctx, pk, "r", nil)
				if err != nil || !bytes.Contains(resp.Value, []byte(fmt.Sprintf(`"N":%d`, n))) {
					t.Fatalf("%s: %s through node %d: %v", when, pk, node+1, err)
				}
			}
			top := int32(7)
			keys, err := entityKeys(c.client(node, "halves"), &aztables.ListEntitiesOptions{Top: &top})
			if err != nil {
				t.Fatalf("%s: a listing through node %d: %v", when, node+1, err)
			}
			if len(keys) != len(acked)+5 || !slices.IsSorted(keys) || len(slices.Compact(slices.Clone(keys))) != len(keys) {
				t.Fatalf("%s: a listing through node %d read %d entities (want %d, each once, in order): %v", when, node+1, len(keys), len(acked)+5, keys)
			}
			filter := "PartitionKey ge 'p25' and PartitionKey lt 'p35'"
			fpager := c.client(node, "halves").NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: &filter})
			n := 0
			for fpager.More() {
				page, err := fpager.NextPage(ctx)
				if err != nil {
					t.Fatalf("%s: a filtered listing through node %d: %v", when, node+1, err)
				}
				n += len(page.Entities)
			}
			if n != 10 {
				t.Fatalf("%s: a filtered listing across the boundary through node %d read %d entities, want 10", when, node+1, n)
			}
		}
	}
	check("after the split")
	out.Reset()
	if code := run([]string{"cluster", "status", "--node", c.nodeAddrs[0], "--cluster-secret", testSecret}, &out, &errOut); code != 0 {
		t.Fatalf("cluster status: %d %s", code, errOut.String())
	}
	if strings.Count(out.String(), "devstoreaccount1/halves") != 2 || !strings.Contains(out.String(), `"p30"`) {
		t.Fatalf("cluster status does not list the two ranges:\n%s", out.String())
	}
	// `cluster move --at` names the new range's group, not the first's.
	child, ok := tableRangeAt(c.nodeAddrs[0], "devstoreaccount1", "halves", "p30", []byte(testSecret))
	if !ok {
		t.Fatal("no leaseholder reports the range at p30")
	}
	out.Reset()
	if code := run([]string{"cluster", "move", "--node", c.nodeAddrs[1], "--table", "halves", "--at", "p44", "--voters", "3,1,2",
		"--timeout", "30s", "--cluster-secret", testSecret}, &out, &errOut); code != 0 {
		t.Fatalf("cluster move --at: %d %s", code, errOut.String())
	}
	if got, _ := tableRangeAt(c.nodeAddrs[0], "devstoreaccount1", "halves", "p30", []byte(testSecret)); got.Group != child.Group ||
		!slices.Equal(got.Replicas, []uint64{3, 1, 2}) {
		t.Fatalf("after cluster move --at p44 the range at p30 is %+v", got)
	}

	// `cluster transfer-lease --at` moves the new range's lease.
	target := child.Leaseholder%3 + 1
	out.Reset()
	if code := run([]string{"cluster", "transfer-lease", "--node", c.nodeAddrs[0], "--table", "halves", "--at", "p31", "--to", fmt.Sprint(target),
		"--cluster-secret", testSecret}, &out, &errOut); code != 0 {
		t.Fatalf("transfer-lease --at: %d %s", code, errOut.String())
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if r, ok := tableRangeAt(c.nodeAddrs[0], "devstoreaccount1", "halves", "p30", []byte(testSecret)); ok && r.Leaseholder == target {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease of the range at p30 did not reach node %d", target)
		}
	}

	// The new range's leaseholder dies under writes to both ranges.
	r, ok := tableRangeAt(c.nodeAddrs[0], "devstoreaccount1", "halves", "p30", []byte(testSecret))
	if !ok {
		t.Fatal("no leaseholder reports the range at p30")
	}
	victim := int(r.Leaseholder) - 1
	c.procs[victim].cmd.Process.Signal(syscall.SIGKILL)
	<-c.procs[victim].exited
	c.procs[victim] = nil
	alive := (victim + 1) % 3
	for i := range 10 {
		upsert(alive, fmt.Sprintf("p%02d", i*6), 200+i)
	}
	c.start(victim, testSecret)
	check("after the new range's leaseholder was killed")

	// `cluster merge` gives the range back to the first one's group,
	// under writes through every node.
	out.Reset()
	done := make(chan int)
	go func() {
		done <- run([]string{"cluster", "merge", "--node", c.nodeAddrs[victim], "--table", "halves", "--at", "p30",
			"--cluster-secret", testSecret}, &out, &errOut)
	}()
	for i := range 20 {
		upsert(i%3, fmt.Sprintf("p%02d", 59-i), 300+i)
	}
	if code := <-done; code != 0 || !strings.Contains(out.String(), `merges at "p30"`) {
		t.Fatalf("cluster merge: %d %s %s", code, out.String(), errOut.String())
	}
	for i := range 20 {
		upsert(i%3, fmt.Sprintf("p%02d", 40+i), 400+i)
	}
	check("after the merge")
	out.Reset()
	if code := run([]string{"cluster", "status", "--node", c.nodeAddrs[0], "--cluster-secret", testSecret}, &out, &errOut); code != 0 {
		t.Fatalf("cluster status: %d %s", code, errOut.String())
	}
	if strings.Count(out.String(), "devstoreaccount1/halves") != 1 {
		t.Fatalf("cluster status does not list one range after the merge:\n%s", out.String())
	}
}
