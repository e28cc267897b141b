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
//   - weights: the heaviest groups' weights, at or above weighedFloor;
//   - cold: the ranges cold and small enough to merge with a neighbour,
//     the limit with the lowest keys (account, table, start).
//
// Keeping the cold ranges with the lowest keys keeps pairs whole: a
// range's left neighbour starts before it, so when the range is kept
// and its neighbour is cold enough too, the neighbour is kept as well.
// The merges find every pair in a prefix of the key space, and the same
// prefix look after look, so a pair's cold time is not lost to another.
type rangeSurvey struct {
	limit      int
	coldOps    float64 // a range under this many operations a second is cold
	mergeBytes int64   // a range under this many bytes may merge

	splits  []RangeStatus
	weights map[uint64]float64
	cold    []RangeStatus
}

// newRangeSurvey returns a survey keeping limit entries of each kind;
// coldOps and mergeBytes pick the ranges to merge (none if coldOps is
// zero).
func newRangeSurvey(limit int, coldOps float64, mergeBytes int64) *rangeSurvey {
	return &rangeSurvey{limit: limit, coldOps: coldOps, mergeBytes: mergeBytes, weights: map[uint64]float64{}}
}

// add takes one range's status into the survey.
func (s *rangeSurvey) add(rs RangeStatus) {
	if w := weight(rs.RangeInfo); w >= weighedFloor {
		// A group reported twice (while its lease moves) sums its
		// reports, unless the first was pruned meanwhile.
		s.weights[rs.Group] += w
		if len(s.weights) >= 2*s.limit {
			s.weights = heaviest(s.weights, s.limit)
		}
	}
	if rs.Group == systemGroup {
		return
	}
	if len(rs.Partitions) >= 2 && len(s.splits) < maxSplitCandidates {
		s.splits = append(s.splits, rs)
	}
	if rs.ReadsPerSecond+rs.WritesPerSecond < s.coldOps && rs.Bytes < s.mergeBytes && s.limit > 0 {
		rs.Partitions = nil // not needed to merge
		s.cold = append(s.cold, rs)
		if len(s.cold) >= 2*s.limit {
			s.cold = lowestKeys(s.cold, s.limit)
		}
	}
}

// heaviestWeights returns the weights of the limit heaviest groups.
func (s *rangeSurvey) heaviestWeights() map[uint64]float64 {
	return heaviest(s.weights, s.limit)
}

// coldRanges returns the limit cold ranges with the lowest keys, in the
// order of their keys.
func (s *rangeSurvey) coldRanges() []RangeStatus {
	return lowestKeys(s.cold, s.limit)
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
