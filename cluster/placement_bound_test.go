package cluster

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/tabuladb/tabula/partition"
)

// TestHeaviestGroups checks the weights the controller keeps between its
// looks: a group's ranges summed, the groups under weighedFloor left out,
// and past the limit only the heaviest, ties going to the lower group.
func TestHeaviestGroups(t *testing.T) {
	stat := func(group uint64, bytes int64, ops float64) RangeStatus {
		return RangeStatus{Group: group, RangeInfo: partition.RangeInfo{Bytes: bytes, ReadsPerSecond: ops}}
	}
	stats := []RangeStatus{
		stat(2, 3<<20, 0),
		stat(2, 3<<20, 0), // a second range of group 2
		stat(3, 1<<10, 0), // idle and small: counted as empty
		stat(4, 0, 2),     // load alone weighs
		stat(5, 4<<20, 0),
		stat(6, 4<<20, 0),
		stat(7, weighedFloor-1, 0),
	}
	for _, c := range []struct {
		limit int
		want  map[uint64]float64
	}{
		{10, map[uint64]float64{2: 6 << 20, 4: 2 << 20, 5: 4 << 20, 6: 4 << 20}},
		{3, map[uint64]float64{2: 6 << 20, 5: 4 << 20, 6: 4 << 20}},
		{2, map[uint64]float64{2: 6 << 20, 5: 4 << 20}},
		{0, map[uint64]float64{}},
	} {
		if got := heaviestGroups(stats, c.limit); !maps.Equal(got, c.want) {
			t.Errorf("limit %d: %v, want %v", c.limit, got, c.want)
		}
	}
}

// TestColdRangesTrackedUpToALimit has the controller look at more cold
// neighbours than maxTracked: it times maxTracked of them, and a range
// that warms up gives its place to one not timed yet.
func TestColdRangesTrackedUpToALimit(t *testing.T) {
	c := &testCluster{t: t, net: newSimNet(11), nodes: map[uint64]*testNode{}, mergeAfter: time.Hour}
	c.startAll(1)
	n := c.nodes[c.peers[0]].node
	ranges := maxTracked + 50
	key := func(i int) string {
		if i == 0 || i == ranges {
			return ""
		}
		return fmt.Sprintf("pk%05d", i)
	}
	stats := make([]RangeStatus, ranges)
	for i := range stats {
		stats[i] = RangeStatus{Account: "a", Table: "t", Group: uint64(100 + i), Replicas: []uint64{n.cfg.ID}, Members: []uint64{n.cfg.ID},
			RangeInfo: partition.RangeInfo{StartPartitionKey: key(i), EndPartitionKey: key(i + 1)}}
	}
	p := placement{coldSince: map[uint64]time.Time{}}
	now := time.Now()
	if p.merge(context.Background(), n, stats, now, nil) {
		t.Fatal("merged before MergeAfter")
	}
	if len(p.coldSince) != maxTracked {
		t.Fatalf("%d cold ranges timed, want %d", len(p.coldSince), maxTracked)
	}
	first := p.coldSince[stats[3].Group]
	// The first right-hand range warms up: it and the range after it
	// (whose left neighbour it is) are timed no more, and the next look
	// times two of the ranges left out in their place.
	coldOps, _ := n.st().MergeThresholds()
	stats[1].WritesPerSecond = coldOps
	for look := 1; look <= 2; look++ {
		p.merge(context.Background(), n, stats, now.Add(time.Duration(look)*time.Second), nil)
		for _, i := range []int{1, 2} {
			if _, ok := p.coldSince[stats[i].Group]; ok {
				t.Fatalf("look %d: range %d is timed, after it or its left neighbour warmed", look, i)
			}
		}
	}
	if len(p.coldSince) != maxTracked {
		t.Fatalf("%d cold ranges timed after two warmed, want %d", len(p.coldSince), maxTracked)
	}
	if got := p.coldSince[stats[3].Group]; !got.Equal(first) {
		t.Fatalf("a range timed since %v is timed since %v after more looks", first, got)
	}
	if _, ok := p.coldSince[stats[maxTracked+1].Group]; !ok {
		t.Fatal("the first range left out is not timed once two places freed")
	}
}
