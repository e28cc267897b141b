package cluster

import (
	"cmp"
	"maps"
	"slices"
)

// maxSplitCandidates bounds the ranges a look keeps to split: it splits
// one, and tries the next only if that fails.
const maxSplitCandidates = 16

// weighedFloor is the weight under which the controller counts a range
// group as empty (groupWeight): a sixty-fourth of groupBaseWeight, so
// that idle groups, the most numerous, cost it nothing between looks.
const weighedFloor = groupBaseWeight / 64

// rangeSurvey is what the controller keeps of a look at every range's
// status (placement.reshape), which it reads one status at a time
// (Node.rangeStats): at most limit entries of each kind between two
// prunings, and so at most twice that, however many ranges the cluster
// has.
//
//   - splits: the first maxSplitCandidates ranges whose leaseholder's
//     store holds two or more range partitions in them;
//   - weights: the heaviest range groups' weights, at or above
//     weighedFloor;
//   - cold: the ranges cold and small enough to merge with a neighbour
//     (a table's only range has none): those of the pairs the controller
//     times already (at most two a pair), and of the others the limit
//     with the lowest keys (account, table, start).
//
// Keeping the cold ranges with the lowest keys keeps pairs whole: a
// range's left neighbour starts before it, so when the range is kept
// and its neighbour is cold enough too, the neighbour is kept as well.
// Keeping the timed pairs' ranges apart from that limit keeps a pair's
// cold time when more cold ranges appear at lower keys.
type rangeSurvey struct {
	limit      int
	coldOps    float64 // a range under this many operations a second is cold
	mergeBytes int64   // a range under this many bytes may merge
	// pinned are the groups of the timed pairs' ranges not seen yet in
	// this look.
	pinned map[uint64]bool

	splits  []RangeStatus
	weights map[uint64]float64
	cold    []RangeStatus // pruned to the limit with the lowest keys
	timed   []RangeStatus // the pinned groups' cold ranges
}

// newRangeSurvey returns a survey keeping limit entries of each kind;
// coldOps and mergeBytes pick the ranges to merge (none if coldOps is
// zero), and the ranges of the pairs of timed are kept whatever their
// keys.
func newRangeSurvey(limit int, coldOps float64, mergeBytes int64, timed map[uint64]coldPair) *rangeSurvey {
	s := &rangeSurvey{limit: limit, coldOps: coldOps, mergeBytes: mergeBytes, weights: map[uint64]float64{},
		pinned: make(map[uint64]bool, 2*len(timed))}
	for right, pair := range timed {
		s.pinned[right], s.pinned[pair.left] = true, true
	}
	return s
}

// add takes one range's status into the survey.
func (s *rangeSurvey) add(rs RangeStatus) {
	if rs.Group == systemGroup {
		return // neither split, merged, nor moved by the balance
	}
	if w := weight(rs.RangeInfo); w >= weighedFloor {
		// A group reported twice (while its lease moves) sums its
		// reports, unless the first was pruned meanwhile.
		s.weights[rs.Group] += w
		if len(s.weights) >= 2*s.limit {
			s.weights = heaviest(s.weights, s.limit)
		}
	}
	if len(rs.Partitions) >= 2 && len(s.splits) < maxSplitCandidates {
		s.splits = append(s.splits, rs)
	}
	wholeTable := rs.StartPartitionKey == "" && rs.EndPartitionKey == ""
	if wholeTable || rs.ReadsPerSecond+rs.WritesPerSecond >= s.coldOps || rs.Bytes >= s.mergeBytes || s.limit == 0 {
		return
	}
	rs.Partitions = nil // not needed to merge
	if s.pinned[rs.Group] {
		delete(s.pinned, rs.Group) // a group reported twice is kept once
		s.timed = append(s.timed, rs)
		return
	}
	s.cold = append(s.cold, rs)
	if len(s.cold) >= 2*s.limit {
		s.cold = lowestKeys(s.cold, s.limit)
	}
}

// heaviestWeights returns the weights of the limit heaviest groups.
func (s *rangeSurvey) heaviestWeights() map[uint64]float64 {
	return heaviest(s.weights, s.limit)
}

// coldRanges returns the cold ranges kept: those of the timed pairs and
// the limit others with the lowest keys, in the order of their keys.
func (s *rangeSurvey) coldRanges() []RangeStatus {
	all := slices.Concat(lowestKeys(s.cold, s.limit), s.timed)
	return lowestKeys(all, len(all))
}

// heaviest returns the limit heaviest entries of weights, ties going to
// the lower group; weights itself when it has no more.
func heaviest(weights map[uint64]float64, limit int) map[uint64]float64 {
	if len(weights) <= limit {
		return weights
	}
	groups := slices.Collect(maps.Keys(weights))
	slices.SortFunc(groups, func(a, b uint64) int {
		return cmp.Or(cmp.Compare(weights[b], weights[a]), cmp.Compare(a, b))
	})
	out := make(map[uint64]float64, limit)
	for _, g := range groups[:limit] {
		out[g] = weights[g]
	}
	return out
}

// lowestKeys sorts ranges by their keys and returns the first limit.
func lowestKeys(ranges []RangeStatus, limit int) []RangeStatus {
	slices.SortFunc(ranges, func(a, b RangeStatus) int {
		return cmp.Or(cmp.Compare(a.Account, b.Account), cmp.Compare(a.Table, b.Table),
			cmp.Compare(a.StartPartitionKey, b.StartPartitionKey), cmp.Compare(a.Group, b.Group))
	})
	if len(ranges) > limit {
		clear(ranges[limit:]) // let the strings and lists go
		ranges = ranges[:limit]
	}
	return ranges
}
