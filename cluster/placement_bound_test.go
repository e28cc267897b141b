package cluster

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/tabuladb/tabula/partition"
)

// TestSurveyWeights checks the weights the controller keeps between its
// looks: a group's ranges summed, the groups under weighedFloor left out,
// and past the limit only the heaviest, ties going to the lower group.
func TestSurveyWeights(t *testing.T) {
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
		s := newRangeSurvey(c.limit, 0, 0)
		for _, rs := range stats {
			s.add(rs)
		}
		if got := s.heaviestWeights(); !maps.Equal(got, c.want) {
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
	coldOps, mergeBytes := n.st().MergeThresholds()
	rng := rand.New(rand.NewPCG(11, 0))
	look := func(at time.Time) bool {
		// The nodes report in any order.
		s := newRangeSurvey(maxTracked, coldOps, mergeBytes)
		for _, i := range rng.Perm(len(stats)) {
			s.add(stats[i])
		}
		return p.merge(context.Background(), n, s.coldRanges(), at, nil)
	}
	now := time.Now()
	if look(now) {
		t.Fatal("merged before MergeAfter")
	}
	// The survey keeps the maxTracked ranges with the lowest keys: every
	// one of them but the first is timed with its left neighbour.
	if len(p.coldSince) != maxTracked-1 {
		t.Fatalf("%d cold ranges timed, want %d", len(p.coldSince), maxTracked-1)
	}
	first := p.coldSince[stats[3].Group]
	// The first right-hand range warms up: it and the range after it
	// (whose left neighbour it is) are timed no more, and the next look
	// times the first range left out.
	stats[1].WritesPerSecond = coldOps
	for i := 1; i <= 2; i++ {
		look(now.Add(time.Duration(i) * time.Second))
		for _, r := range []int{1, 2} {
			if _, ok := p.coldSince[stats[r].Group]; ok {
				t.Fatalf("look %d: range %d is timed, after it or its left neighbour warmed", i, r)
			}
		}
	}
	if len(p.coldSince) != maxTracked-2 {
		t.Fatalf("%d cold ranges timed after one warmed, want %d", len(p.coldSince), maxTracked-2)
	}
	if got := p.coldSince[stats[3].Group]; !got.Equal(first) {
		t.Fatalf("a range timed since %v is timed since %v after more looks", first, got)
	}
	if _, ok := p.coldSince[stats[maxTracked].Group]; !ok {
		t.Fatal("the first range left out is not timed once a place freed")
	}
}

// TestSurveyBounded feeds a survey many more ranges than its limit, in
// random order, and checks that it kept exactly what a survey holding
// them all would: the heaviest groups, the cold ranges with the lowest
// keys, and the first ranges to split; and never more than twice the
// limit meanwhile.
func TestSurveyBounded(t *testing.T) {
	const limit, ranges = 64, 5000
	rng := rand.New(rand.NewPCG(5, 0))
	all := make([]RangeStatus, ranges)
	for i := range all {
		rs := RangeStatus{Account: "a", Table: fmt.Sprintf("t%d", i%7), Group: uint64(10 + i)}
		rs.StartPartitionKey = fmt.Sprintf("pk%06d", rng.IntN(1_000_000))
		rs.Bytes = rng.Int64N(8 << 20)
		if rng.IntN(4) == 0 {
			rs.WritesPerSecond = 100 // warm
		}
		if rng.IntN(50) == 0 {
			rs.Partitions = make([]partition.RangeInfo, 2)
		}
		all[i] = rs
	}
	const coldOps, mergeBytes = 10, 4 << 20
	s := newRangeSurvey(limit, coldOps, mergeBytes)
	var splits []uint64
	for _, rs := range all {
		s.add(rs)
		if len(s.weights) >= 2*limit || len(s.cold) >= 2*limit {
			t.Fatalf("the survey holds %d weights and %d cold ranges, limit %d", len(s.weights), len(s.cold), limit)
		}
		if len(rs.Partitions) >= 2 && len(splits) < maxSplitCandidates {
			splits = append(splits, rs.Group)
		}
	}

	byWeight := slices.Clone(all)
	slices.SortFunc(byWeight, func(a, b RangeStatus) int {
		return cmp.Or(cmp.Compare(weight(b.RangeInfo), weight(a.RangeInfo)), cmp.Compare(a.Group, b.Group))
	})
	wantWeights := map[uint64]float64{}
	for _, rs := range byWeight[:limit] {
		wantWeights[rs.Group] = weight(rs.RangeInfo)
	}
	if got := s.heaviestWeights(); !maps.Equal(got, wantWeights) {
		t.Errorf("weights %v, want %v", got, wantWeights)
	}

	var cold []RangeStatus
	for _, rs := range all {
		if rs.WritesPerSecond < coldOps && rs.Bytes < mergeBytes {
			cold = append(cold, rs)
		}
	}
	wantCold := lowestKeys(cold, limit)
	if got := s.coldRanges(); !slices.EqualFunc(got, wantCold, func(a, b RangeStatus) bool { return a.Group == b.Group }) {
		t.Errorf("cold ranges %v, want %v", got, wantCold)
	}

	var gotSplits []uint64
	for _, rs := range s.splits {
		gotSplits = append(gotSplits, rs.Group)
	}
	if !slices.Equal(gotSplits, splits) {
		t.Errorf("ranges to split %v, want %v", gotSplits, splits)
	}
}

// BenchmarkRangeSurvey measures what a look at the ranges holds at its
// end, by the ranges of the cluster: the list of every status the
// controller used to gather, against the survey, read one status at a
// time.
func BenchmarkRangeSurvey(b *testing.B) {
	status := func(i int) RangeStatus {
		rs := RangeStatus{Account: "devstoreaccount1", Table: fmt.Sprintf("table%06d", i/4), Group: uint64(10 + i),
			Replicas: []uint64{1, 2, 3}, Members: []uint64{1, 2, 3}, Leaseholder: 1}
		rs.StartPartitionKey = fmt.Sprintf("pk%08d", i%4*1000)
		rs.EndPartitionKey = fmt.Sprintf("pk%08d", (i%4+1)*1000)
		rs.Bytes = int64(i%97) << 10
		return rs
	}
	for _, ranges := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("%d/list", ranges), func(b *testing.B) {
			var held int64
			for range b.N {
				before := liveHeap()
				var list []RangeStatus
				for i := range ranges {
					list = append(list, status(i))
				}
				held = liveHeap() - before
				runtime.KeepAlive(list)
			}
			b.ReportMetric(float64(held)/1024, "held-KiB")
		})
		b.Run(fmt.Sprintf("%d/survey", ranges), func(b *testing.B) {
			var held int64
			for range b.N {
				before := liveHeap()
				s := newRangeSurvey(maxTracked, 10, 64<<20)
				for i := range ranges {
					s.add(status(i))
				}
				held = liveHeap() - before
				runtime.KeepAlive(s)
			}
			b.ReportMetric(float64(held)/1024, "held-KiB")
		})
	}
}

// liveHeap returns the heap in use after a collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
