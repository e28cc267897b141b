package cluster

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
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
		s := newRangeSurvey(c.limit, 0, 0, nil)
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
	p := placement{coldSince: map[uint64]coldPair{}}
	coldOps, mergeBytes := n.st().MergeThresholds()
	rng := rand.New(rand.NewPCG(11, 0))
	look := func(seconds int) bool {
		// The nodes report in any order.
		s := newRangeSurvey(maxTracked, coldOps, mergeBytes, p.coldSince)
		for _, i := range rng.Perm(len(stats)) {
			s.add(stats[i])
		}
		return p.merge(context.Background(), n, s, time.Unix(1e9+int64(seconds), 0), nil)
	}
	if look(0) {
		t.Fatal("merged before MergeAfter")
	}
	// The survey keeps the maxTracked ranges with the lowest keys: every
	// one of them but the first is timed with its left neighbour. The
	// next look keeps those and the lowest of the others, and times one
	// more pair, up to maxTracked.
	if len(p.coldSince) != maxTracked-1 {
		t.Fatalf("%d cold ranges timed, want %d", len(p.coldSince), maxTracked-1)
	}
	look(1)
	if len(p.coldSince) != maxTracked {
		t.Fatalf("%d cold ranges timed after a second look, want %d", len(p.coldSince), maxTracked)
	}
	first := p.coldSince[stats[3].Group].since
	// The first right-hand range warms up: it and the range after it
	// (whose left neighbour it is) are timed no more, and the look after
	// that times two of the ranges left out in their place.
	stats[1].WritesPerSecond = coldOps
	for i := 2; i <= 3; i++ {
		look(i)
		for _, r := range []int{1, 2} {
			if _, ok := p.coldSince[stats[r].Group]; ok {
				t.Fatalf("look %d: range %d is timed, after it or its left neighbour warmed", i, r)
			}
		}
	}
	if len(p.coldSince) != maxTracked {
		t.Fatalf("%d cold ranges timed after two warmed, want %d", len(p.coldSince), maxTracked)
	}
	if got := p.coldSince[stats[3].Group].since; !got.Equal(first) {
		t.Fatalf("a range timed since %v is timed since %v after more looks", first, got)
	}
	if _, ok := p.coldSince[stats[maxTracked+1].Group]; !ok {
		t.Fatal("the first range left out is not timed once two places freed")
	}
}

// TestSurveyKeepsPairs checks which cold ranges a survey keeps past its
// limit: never a table's only range (it has no neighbour), and the
// ranges of a timed pair whatever lower keys come.
func TestSurveyKeepsPairs(t *testing.T) {
	const limit, coldOps, mergeBytes = 4, 10, 1 << 20
	rs := func(table string, group uint64, start, end string) RangeStatus {
		return RangeStatus{Account: "a", Table: table, Group: group, RangeInfo: partition.RangeInfo{StartPartitionKey: start, EndPartitionKey: end}}
	}
	groups := func(kept []RangeStatus) []uint64 {
		var out []uint64
		for _, r := range kept {
			out = append(out, r.Group)
		}
		return out
	}
	// Tables of one range each, at lower keys than a pair.
	s := newRangeSurvey(limit, coldOps, mergeBytes, nil)
	for i := range 3 * limit {
		s.add(rs(fmt.Sprintf("a%02d", i), uint64(10+i), "", ""))
	}
	s.add(rs("z", 100, "", "m"))
	s.add(rs("z", 101, "m", ""))
	if got := groups(s.coldRanges()); !slices.Equal(got, []uint64{100, 101}) {
		t.Errorf("with one-range tables before a pair: kept %v, want [100 101]", got)
	}
	// A timed pair, and more cold ranges at lower keys than the limit;
	// the pair's right range reported twice.
	s = newRangeSurvey(limit, coldOps, mergeBytes, map[uint64]coldPair{101: {left: 100}})
	for i := range 3 * limit {
		s.add(rs("a", uint64(10+i), fmt.Sprintf("k%02d", i), fmt.Sprintf("k%02d", i+1)))
	}
	s.add(rs("z", 101, "m", ""))
	s.add(rs("z", 100, "", "m"))
	s.add(rs("z", 101, "m", ""))
	if got := groups(s.coldRanges()); !slices.Equal(got, []uint64{10, 11, 12, 13, 100, 101}) {
		t.Errorf("with a timed pair after more cold ranges than the limit: kept %v, want [10 11 12 13 100 101]", got)
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
	s := newRangeSurvey(limit, coldOps, mergeBytes, nil)
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
	key := func(rs RangeStatus) string { return rs.Account + "/" + rs.Table + "/" + rs.StartPartitionKey }
	slices.SortStableFunc(cold, func(a, b RangeStatus) int { return strings.Compare(key(a), key(b)) })
	wantCold := cold[:limit]
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
				s := newRangeSurvey(maxTracked, 10, 64<<20, nil)
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
