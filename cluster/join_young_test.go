package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tabuladb/tabula/vfs"
)

// TestJoinYoungCluster adds a node to a cluster whose logs were never
// compacted (a few writes, far below the retention): the founders'
// configuration is in no log entry (it was bootstrapped), so the new node
// must be brought up by a snapshot, not by the log from its first entry.
// With range groups on, the snapshot holds the range groups' data of
// which the new node is no voter.
func TestJoinYoungCluster(t *testing.T) {
	for _, ranges := range []bool{false, true} {
		t.Run(fmt.Sprintf("range-groups=%v", ranges), func(t *testing.T) {
			c := newTestCluster(t, 3, 31)
			if ranges {
				c.stopAll()
				c = newTablesCluster(t, 3, 31)
			}
			createVia(c, "young")
			for i := range 5 {
				upsertVia(c, "young", "p", fmt.Sprintf("r%d", i), i)
			}
			ctx := context.Background()
			id, err := retryAny(c, func(s *Store) (uint64, error) { return s.n.AddMember(ctx, "sim-4") })
			if err != nil || id != 4 {
				t.Fatalf("AddMember: %d, %v", id, err)
			}
			c.peers = append(c.peers, 4)
			joiner := c.startAs(4, vfs.NewMem(), true)
			upsertVia(c, "young", "p", "after", 9)
			c.waitVoter(4, 20*time.Second)
			c.converge(20 * time.Second)
			if err := joiner.node.Err(); err != nil {
				t.Fatalf("the new node failed: %v", err)
			}
			// Through the new node's store: the table is there (its entities
			// too, without range groups; with them, the group's voters hold
			// them).
			if _, err := joiner.node.st().GetTable(ctx, acct, "young"); err != nil {
				t.Fatalf("the new node's catalog: %v", err)
			}
			if !ranges {
				if _, err := joiner.node.st().GetEntity(ctx, acct, "young", "p", "after"); err != nil {
					t.Fatalf("the new node's copy: %v", err)
				}
			}
			e, err := readVia(c, "young", "p", "after")
			if err != nil || entityN(t, e) != 9 {
				t.Fatalf("read: %+v, %v", e, err)
			}
		})
	}
}
