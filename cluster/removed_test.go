package cluster

import (
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
	if err := c.removeMember(victim); err != nil {
		t.Fatalf("removing %d: %v", victim, err)
	}
	for range 2 {
		waitRemoved(t, c.start(victim, disk), 10*time.Second)
		c.stop(victim)
	}
}
