package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/tabuladb/tabula/partition"
)

// TestBalanceMove checks the balance's choice on hand-made placements:
// with groups of one weight it moves as counting groups did, with bytes
// and load it weighs them, it never moves a group heavier than the gap
// it closes (which would only swap the two nodes' roles), and it leaves
// unsettled groups alone.
func TestBalanceMove(t *testing.T) {
	group := func(id uint64, voters ...uint64) partition.TableGroup {
		return partition.TableGroup{Table: "t", Group: partition.RangeGroup{ID: id, Voters: voters}}
	}
	t0 := time.Unix(1000, 0)
	cases := []struct {
		name     string
		usable   []uint64
		groups   []partition.TableGroup
		weights  map[uint64]float64 // beyond groupBaseWeight
		unsettle []uint64
		// the group moved, from and to; group 0: none
		group, from, to uint64
	}{
		{
			name:   "a new node takes a group, the one named longest ago",
			usable: []uint64{1, 2, 3, 4},
			groups: []partition.TableGroup{group(5, 1, 2, 3), group(6, 1, 2, 3), group(7, 1, 2, 3)},
			group:  5, from: 1, to: 4,
		},
		{
			name:   "counts one apart: nothing moves",
			usable: []uint64{1, 2},
			groups: []partition.TableGroup{group(5, 1), group(6, 1), group(7, 2)},
		},
		{
			name:    "a heavy group is not moved past even",
			usable:  []uint64{1, 2},
			groups:  []partition.TableGroup{group(5, 1), group(6, 2), group(7, 2)},
			weights: map[uint64]float64{5: 100 << 20, 6: 30 << 20, 7: 40 << 20},
		},
		{
			name:   "the group that evens the two out best moves",
			usable: []uint64{1, 2},
			groups: []partition.TableGroup{group(5, 1), group(6, 1), group(7, 1)},
			// 123 MiB apart with the bases: moving group 7 (56) leaves 11.
			weights: map[uint64]float64{5: 10 << 20, 6: 25 << 20, 7: 40 << 20},
			group:   7, from: 1, to: 2,
		},
		{
			name:   "bytes outweigh counts",
			usable: []uint64{1, 2},
			groups: []partition.TableGroup{group(5, 1), group(6, 1), group(7, 2), group(8, 2), group(9, 2)},
			// node 1: 2 groups, 200 MiB + 2 bases; node 2: 3 groups, 30 MiB + 3 bases
			weights: map[uint64]float64{5: 120 << 20, 6: 80 << 20, 7: 10 << 20, 8: 10 << 20, 9: 10 << 20},
			group:   6, from: 1, to: 2,
		},
		{
			name:     "an unsettled group stays",
			usable:   []uint64{1, 2, 3, 4},
			groups:   []partition.TableGroup{group(5, 1, 2, 3), group(6, 1, 2, 3)},
			unsettle: []uint64{5, 6},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			named := map[uint64]time.Time{}
			for i, tg := range c.groups {
				named[tg.Group.ID] = t0.Add(time.Duration(i) * time.Second)
			}
			weight := func(g uint64) float64 { return groupBaseWeight + c.weights[g] }
			settled := func(tg partition.TableGroup) bool {
				for _, g := range c.unsettle {
					if g == tg.Group.ID {
						return false
					}
				}
				return true
			}
			move, from, to := balanceMove(c.usable, slices.Values(c.groups), weight, settled, named)
			switch {
			case c.group == 0 && move != nil:
				t.Errorf("moved group %d from %d to %d, want no move", move.Group.ID, from, to)
			case c.group != 0 && move == nil:
				t.Errorf("no move, want group %d from %d to %d", c.group, c.from, c.to)
			case c.group != 0 && (move.Group.ID != c.group || from != c.from || to != c.to):
				t.Errorf("moved group %d from %d to %d, want group %d from %d to %d", move.Group.ID, from, to, c.group, c.from, c.to)
			}
		})
	}
}
