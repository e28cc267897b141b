package partition

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/tabuladb/tabula/lsm"
)

// RangeGroup is a table's range descriptor in a cluster: the raft group
// that replicates the table's entities, and the nodes meant to be its
// voters. A cluster's system group decides it when the table is created
// and whenever its replicas are to move, and every replica records it in
// the table's catalog entry, so the descriptor is as replicated as the
// catalog. The group's own log decides who its members are at any moment;
// its leader moves them toward the descriptor's voters. The zero
// RangeGroup (a single node, or a table made before range groups) means
// the table's entities are replicated with the catalog.
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

// ValidVoters checks a descriptor's voters: 1 to MaxGroupVoters node ids,
// none 0, none twice.
func ValidVoters(voters []uint64) error {
	if len(voters) == 0 || len(voters) > MaxGroupVoters {
		return fmt.Errorf("partition: a range group has 1 to %d voters, not %d", MaxGroupVoters, len(voters))
	}
	for i, v := range voters {
		if v == 0 || slices.Contains(voters[:i], v) {
			return fmt.Errorf("partition: range group voters %v: a node id is 0 or named twice", voters)
		}
	}
	return nil
}

// setGroup makes g the table's descriptor.
func (t *table) setGroup(g RangeGroup) {
	g = g.clone()
	t.group.Store(&g)
}

// rangeGroup returns the table's descriptor; the zero RangeGroup when its
// entities have no group of their own.
func (t *table) rangeGroup() RangeGroup {
	if g := t.group.Load(); g != nil {
		return *g
	}
	return RangeGroup{}
}

// TableGroup returns the range group of a live table: TableNotFound when
// there is none, the zero RangeGroup when its entities have no group.
// The voters are shared: the caller must not change them.
func (s *Store) TableGroup(account, name string) (RangeGroup, error) {
	t, err := s.lookupTable(account, name)
	if err != nil {
		return RangeGroup{}, err
	}
	return t.rangeGroup(), nil
}

// GroupTable returns the live table that range group id replicates, and
// its descriptor.
func (s *Store) GroupTable(id uint64) (TableGroup, bool) {
	v, ok := s.groups.Load(id)
	if !ok {
		return TableGroup{}, false
	}
	t := v.(*table)
	return TableGroup{Account: t.account, Table: t.name, Group: t.rangeGroup().clone()}, true
}

// TableGroups lists the live tables that have a range group, by group id.
func (s *Store) TableGroups() []TableGroup {
	var out []TableGroup
	s.groups.Range(func(_, v any) bool {
		t := v.(*table)
		out = append(out, TableGroup{Account: t.account, Table: t.name, Group: t.rangeGroup().clone()})
		return true
	})
	slices.SortFunc(out, func(a, b TableGroup) int { return cmp.Compare(a.Group.ID, b.Group.ID) })
	return out
}

// SetGroupVoters records new voters in the descriptor of the table that
// range group group replicates: a cluster's system group applies it when
// the group's replicas are to move. A table without that group (dropped,
// or created again under another) is TableNotFound; voters must pass
// ValidVoters.
func (s *Store) SetGroupVoters(ctx context.Context, account, name string, group uint64, voters []uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidVoters(voters); err != nil {
		return serviceErrorf(CodeInvalidInput, "The range group's voters are not valid.", "(%v)", err)
	}
	s.catMu.Lock()
	defer s.catMu.Unlock()
	t, err := s.lookupTable(account, name)
	if err != nil {
		return err
	}
	g := t.rangeGroup()
	if g.ID == 0 || g.ID != group {
		return serviceError(CodeTableNotFound, msgTableNotFound)
	}
	g = RangeGroup{ID: g.ID, Voters: slices.Clone(voters)}
	b := s.db.NewBatch()
	b.Set(catalogKey(account, t.lower), encodeCatalogValue(t.id, g, t.name))
	if err := s.db.Apply(b, s.writeOptions(ctx, b)); err != nil {
		return fmt.Errorf("partition: set the voters of range group %d: %w", group, err)
	}
	t.setGroup(g)
	return nil
}
