package partition

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/tabuladb/tabula/lsm"
)

// RangeGroup is a table's range descriptor in a cluster: the raft group
// that replicates the table's entities, and the nodes that are its
// voters. A cluster's system group decides it when the table is created
// and every replica records it in the table's catalog entry, so the
// descriptor is as replicated as the catalog. The zero RangeGroup (a
// single node, or a table made before range groups) means the table's
// entities are replicated with the catalog.
type RangeGroup struct {
	ID     uint64
	Voters []uint64
}

// MaxGroupVoters bounds a descriptor's voters: a decoder refuses more.
const MaxGroupVoters = 7

// TableGroup is a table and its range group.
type TableGroup struct {
	Account, Table string
	Group          RangeGroup
}

func (g RangeGroup) clone() RangeGroup {
	return RangeGroup{ID: g.ID, Voters: slices.Clone(g.Voters)}
}

// Has says whether node is one of the group's voters.
func (g RangeGroup) Has(node uint64) bool { return slices.Contains(g.Voters, node) }

// append encodes g: uvarint id, uvarint count, count × uvarint voter.
func (g RangeGroup) append(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, g.ID)
	dst = binary.AppendUvarint(dst, uint64(len(g.Voters)))
	for _, v := range g.Voters {
		dst = binary.AppendUvarint(dst, v)
	}
	return dst
}

func decodeRangeGroup(b []byte) (RangeGroup, []byte, error) {
	bad := func(what string) (RangeGroup, []byte, error) {
		return RangeGroup{}, nil, fmt.Errorf("range group: %s: %w", what, lsm.ErrCorruption)
	}
	id, n := binary.Uvarint(b)
	if n <= 0 || id == 0 {
		return bad("bad id")
	}
	b = b[n:]
	count, n := binary.Uvarint(b)
	if n <= 0 || count == 0 || count > MaxGroupVoters {
		return bad("bad voter count")
	}
	b = b[n:]
	g := RangeGroup{ID: id, Voters: make([]uint64, count)}
	for i := range g.Voters {
		v, n := binary.Uvarint(b)
		if n <= 0 || v == 0 {
			return bad("bad voter")
		}
		g.Voters[i], b = v, b[n:]
	}
	return g, b, nil
}

// TableGroup returns the range group of a live table: TableNotFound when
// there is none, the zero RangeGroup when its entities have no group.
func (s *Store) TableGroup(account, name string) (RangeGroup, error) {
	t, err := s.lookupTable(account, name)
	if err != nil {
		return RangeGroup{}, err
	}
	return t.group, nil
}

// TableGroups lists the live tables that have a range group, by group id.
func (s *Store) TableGroups() []TableGroup {
	var out []TableGroup
	s.tables.Range(func(_, v any) bool {
		t := v.(*table)
		if t.group.ID != 0 {
			out = append(out, TableGroup{Account: t.account, Table: t.name, Group: t.group.clone()})
		}
		return true
	})
	slices.SortFunc(out, func(a, b TableGroup) int { return cmp.Compare(a.Group.ID, b.Group.ID) })
	return out
}
