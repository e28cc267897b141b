package cluster

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestNodeRemovedWhileDownStops removes a node while it is down, then
// starts it again on its disk: its log never got the entry removing it,
// and the leader no longer sends it anything, so it learns of its removal
// from the members' answers to its liveness messages, and stops with
// ErrRemoved; started again, it stops at once.
func TestNodeRemovedWhileDownStops(t *testing.T) {
	c := newTestCluster(t, 3, 21)
	victim := otherThan(c, c.leader(10*time.Second).id)
	disk := c.nodes[victim].fs
	c.stop(victim)
	if _, err := retryMember(c, func(n *Node) (uint64, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return 0, n.RemoveMember(ctx, victim)
	}); err != nil {
		t.Fatalf("removing %d: %v", victim, err)
	}
	for range 2 {
		back := c.start(victim, disk)
		select {
		case err := <-back.done:
			if !errors.Is(err, ErrRemoved) {
				t.Fatalf("the removed node stopped with %v", err)
			}
			back.done <- err
		case <-time.After(10 * time.Second):
			t.Fatal("the node removed while it was down did not stop")
		}
		c.stop(victim)
	}
}
