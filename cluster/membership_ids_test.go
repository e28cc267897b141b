package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/cluster/transport"
	"github.com/tabuladb/tabula/partition"
)

// holdConfChanges makes a conf change proposed by ld unable to commit,
// while ld still leads and takes requests: every raft clock stands still
// (no heartbeat, no election, no check of the quorum) and ld is cut off
// from the others. The returned function undoes it.
func holdConfChanges(c *testCluster, ld *testNode) (release func()) {
	var others []uint64
	for id, tn := range c.nodes {
		tn.paused.Store(true)
		if id != ld.id {
			others = append(others, id)
		}
	}
	c.net.partition([]uint64{ld.id}, others)
	return func() {
		c.net.heal()
		for _, tn := range c.nodes {
			tn.paused.Store(false)
		}
	}
}

// waitLogGrows waits until node tn's raft log holds more than last
// entries: a proposal is in it.
func waitLogGrows(t *testing.T, tn *testNode, last uint64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if l, _ := tn.logGroup(systemGroup).LastIndex(); l > last {
			return
		}
	}
	t.Fatal("the proposal never reached the leader's log")
}

// TestMemberChangeWhilePendingIsBusy: raft takes one configuration change
// at a time and silently turns one proposed while another is pending
// into an empty entry. The leader answers such a request at once with a
// ServerBusy to retry, not with an OperationTimedOut once the caller's
// time has run out; once the pending change is applied, the request
// asked again succeeds.
func TestMemberChangeWhilePendingIsBusy(t *testing.T) {
	c := newTestCluster(t, 3, 21)
	ld := c.leader(10 * time.Second)
	release := holdConfChanges(c, ld)
	defer release()
	last, _ := ld.logGroup(systemGroup).LastIndex()
	first := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		id, err := ld.node.AddMember(ctx, "sim-4")
		if err == nil && id != 4 {
			err = fmt.Errorf("the first new node got id %d, not 4", id)
		}
		first <- err
	}()
	waitLogGrows(t, ld, last)

	for _, ask := range []struct {
		what string
		do   func(ctx context.Context) error
	}{
		{"an add", func(ctx context.Context) error { _, err := ld.node.AddMember(ctx, "sim-5"); return err }},
		{"a removal", func(ctx context.Context) error { return ld.node.RemoveMember(ctx, otherThan(c, ld.id)) }},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := time.Now()
		err := ask.do(ctx)
		cancel()
		if took := time.Since(start); codeOf(err) != "ServerBusy" || took > 2*time.Second {
			t.Fatalf("%s asked while a change is pending: %v after %v; want ServerBusy at once", ask.what, err, took.Round(time.Millisecond))
		}
	}

	release()
	if err := <-first; err != nil {
		t.Fatalf("the pending change: %v", err)
	}
	id, err := retryMember(c, func(n *Node) (uint64, error) { return n.AddMember(context.Background(), "sim-5") })
	if err != nil || id != 5 {
		t.Fatalf("asked again once the first change applied: id %d, %v", id, err)
	}
}

// TestMemberChangeRefusedByRaftIsBusy: should raft refuse a change the
// leader took for free to go (here the leader's own check is off), the
// leader finds the change's index applied without it and answers
// ServerBusy, instead of waiting for a change that will never come.
func TestMemberChangeRefusedByRaftIsBusy(t *testing.T) {
	c := newTestCluster(t, 3, 22)
	ld := c.leader(10 * time.Second)
	ld.node.members.noPrecheck.Store(true)
	release := holdConfChanges(c, ld)
	defer release()
	last, _ := ld.logGroup(systemGroup).LastIndex()
	first := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := ld.node.AddMember(ctx, "sim-4")
		first <- err
	}()
	waitLogGrows(t, ld, last)
	second := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := ld.node.AddMember(ctx, "sim-5")
		second <- err
	}()
	waitLogGrows(t, ld, last+1) // raft's empty entry in place of the change
	release()
	if err := <-first; err != nil {
		t.Fatalf("the first change: %v", err)
	}
	select {
	case err := <-second:
		if codeOf(err) != "ServerBusy" {
			t.Fatalf("the change raft refused: %v; want ServerBusy", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the change raft refused was not answered 5 s after the entries committed")
	}
}

// TestNodeIDsAreNeverReused: a new node's id is past every id the group
// ever assigned, removed nodes' included, whichever node leads, after a
// restart of every node, and on a node that caught up by snapshot; a
// removed node restarted on its data directory stops at once.
func TestNodeIDsAreNeverReused(t *testing.T) {
	c := newTestCluster(t, 3, 23)
	ctx := context.Background()
	if _, err := retryLeader(c, func(s *Store) (partition.StoredEntity, error) {
		_, err := s.CreateTable(ctx, acct, "ids")
		return partition.StoredEntity{}, err
	}); err != nil {
		t.Fatal(err)
	}
	add := func(addr string, want uint64) {
		t.Helper()
		id, err := retryMember(c, func(n *Node) (uint64, error) {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			return n.AddMember(ctx, addr)
		})
		if err != nil || id != want {
			t.Fatalf("adding %s: id %d, %v; want id %d", addr, id, err, want)
		}
	}
	remove := func(id uint64) {
		t.Helper()
		if err := c.removeMember(id); err != nil {
			t.Fatalf("removing %d: %v", id, err)
		}
	}
	// A follower misses the changes and catches up by snapshot later.
	lag := otherThan(c, c.leader(10*time.Second).id)
	lagDisk := c.crash(lag, nil)

	// Nodes 4 and 5 are added (never started: they stand for nodes that
	// are down) and removed; the next one is 6, not 4.
	add("sim-4", 4)
	add("sim-5", 5)
	remove(4)
	remove(5)
	add("sim-6", 6)
	remove(6)
	// Removing a removed node again (a retry after an unknown outcome)
	// succeeds.
	remove(5)

	for i := range 200 { // past LogRetention and SyncEvery: the logs are compacted
		if _, err := retryLeader(c, func(s *Store) (partition.StoredEntity, error) {
			return s.Apply(ctx, acct, "ids", partition.Op{Kind: partition.OpInsertOrReplace, Entity: ent("p", fmt.Sprintf("r%03d", i), i)})
		}); err != nil {
			t.Fatal(err)
		}
	}
	tn := c.start(lag, lagDisk)
	c.converge(20 * time.Second)
	if st := tn.node.Status(); st.SnapshotsInstalled == 0 {
		t.Fatalf("node %d caught up without a snapshot: the test lost its point", lag)
	}
	for id, tn := range c.nodes {
		b := tn.node.members.clone()
		if b.highest != 6 || !b.removed[4] || !b.removed[5] || !b.removed[6] || b.addrs[4] != "" {
			t.Errorf("node %d's member book: highest %d, removed %v, addresses %v", id, b.highest, b.removed, b.addrs)
		}
	}

	// Another leader assigns past them too.
	old := c.leader(10 * time.Second)
	c.stop(old.id)
	add("sim-7", 7)
	c.start(old.id, old.fs)
	// And so does every node after a restart (the book is on disk).
	c.restartAll()
	add("sim-8", 8)

	// A removed node stays removed: it stops when it applies its removal,
	// and again at once when restarted on its data directory.
	victim := otherThan(c, c.leader(10*time.Second).id)
	remove(victim)
	waitRemoved(t, c.nodes[victim], 10*time.Second)
	disk := c.nodes[victim].fs
	c.stop(victim)
	waitRemoved(t, c.start(victim, disk), 5*time.Second) // restarted on its data directory
	c.stop(victim)
	add("sim-9", 9)
}

// otherThan returns the id of a running node other than id.
func otherThan(c *testCluster, id uint64) uint64 {
	for other := range c.nodes {
		if other != id {
			return other
		}
	}
	return 0
}

// removeMember removes node id through the ready leader, asking again
// while it answers ServerBusy.
func (c *testCluster) removeMember(id uint64) error {
	_, err := retryMember(c, func(n *Node) (uint64, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return 0, n.RemoveMember(ctx, id)
	})
	return err
}

// waitRemoved waits until tn's run ends with ErrRemoved, and leaves the
// result for stop.
func waitRemoved(t testing.TB, tn *testNode, timeout time.Duration) {
	t.Helper()
	select {
	case err := <-tn.done:
		if !errors.Is(err, ErrRemoved) {
			t.Fatalf("node %d stopped with %v, want ErrRemoved", tn.id, err)
		}
		tn.done <- err
	case <-time.After(timeout):
		t.Fatalf("node %d, removed, did not stop in %v", tn.id, timeout)
	}
}

// retryMember runs a membership change on the ready leader, asking again
// while it answers ServerBusy (a leader handing over, a change pending).
func retryMember(c *testCluster, f func(*Node) (uint64, error)) (uint64, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		id, err := f(c.leader(10 * time.Second).node)
		if codeOf(err) != "ServerBusy" || time.Now().After(deadline) {
			return id, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMemberAddressesAreChecked: MEMBERS holds a member's address after
// its id and a space, one a line, so an address with a space, a line
// break or a carriage return would not read back, and the node could not
// restart. The configuration, AddMember and the operator's request refuse
// one, and nothing is proposed.
func TestMemberAddressesAreChecked(t *testing.T) {
	c := newTestCluster(t, 3, 24)
	ld := c.leader(10 * time.Second)
	cfg := ld.node.cfg
	cfg.Members = map[uint64]string{1: "sim-1", 2: "sim-2\r"}
	if _, err := NewNode(cfg); err == nil || !strings.Contains(err.Error(), "member 2") {
		t.Errorf("a configured member's address with a carriage return: %v", err)
	}

	highest := ld.node.members.highest()
	last, _ := ld.logGroup(systemGroup).LastIndex()
	for _, addr := range []string{"", "sim 4", "sim-4\r", "sim-4\n2 sim-5", "sim-\x004", "sim-\u00e94"} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if _, err := ld.node.AddMember(ctx, addr); err == nil || ctx.Err() != nil {
			t.Errorf("AddMember(%q) was taken, or not refused at once: %v", addr, err)
		}
		cancel()
	}
	secret := []byte("a cluster secret of thirty-two bytes")
	h := NewHTTP(ld.node, http.NotFoundHandler(), nil, secret)
	for _, addr := range []string{"", "sim-4", "127.0.0.1:7004\r", "127.0.0.1 :7004"} {
		req := httptest.NewRequest(http.MethodPost, membersPath+"?addr="+url.QueryEscape(addr), nil)
		transport.Sign(req, secret, purposeMember, 0, ld.id, time.Now())
		rec := httptest.NewRecorder()
		h.Internal().ServeHTTP(rec, req)
		if rec.Code != http.StatusBadRequest {
			t.Errorf("the operator's add of %q: %d %s", addr, rec.Code, rec.Body)
		}
	}
	if l, _ := ld.logGroup(systemGroup).LastIndex(); l != last || ld.node.members.highest() != highest {
		t.Errorf("a refused address changed the group: log %d -> %d, highest %d -> %d", last, l, highest, ld.node.members.highest())
	}
}
