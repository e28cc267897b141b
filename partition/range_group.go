package partition

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/tabuladb/tabula/lsm"
)

// RangeGroup is the descriptor of one range of a table in a cluster: the
// raft group that replicates the table's entities whose PartitionKey is
// in the range, from Start to the next range's (the first range starts at
// "", a table not split has one), and the nodes meant to be its voters.
// A cluster's system group decides the descriptors when the table is
// created, when a range is split, and whenever a group's replicas are to
// move, and every replica records them in the table's catalog entry, so
// they are as replicated as the catalog. A group's own log decides who
// its members are at any moment, and which keys it holds (GroupSpan); its
// leader moves it toward the descriptor. A table without descriptors (a
// single node, or a table made before range groups) has its entities
// replicated with the catalog.
type RangeGroup struct {
	ID     uint64
	Voters []uint64
	Start  string
}

// GroupStartIndex is where a new table's range group's log starts: after
// a snapshot position at this index (term 1), which its table's creation
// makes the group's applied index in the store. Its log never holds entry
// GroupStartIndex, so a member added to it, which has nothing, always
// starts from a snapshot. A split's child starts likewise after the
// split's index in its parent's log (SplitGroupSpan).
const GroupStartIndex = 1

// MaxGroupVoters bounds a descriptor's voters: a decoder refuses more.
const MaxGroupVoters = 7

// TableGroup is a range group and its table; End is the PartitionKey
// its range ends before, the next range's start ("" for the last range:
// unbounded).
type TableGroup struct {
	Account, Table string
	Group          RangeGroup
	End            string
}

// Span is the span of the group's range, as the catalog has it.
func (tg TableGroup) Span() Span {
	return Span{Account: tg.Account, Table: tg.Table, LowPartitionKey: tg.Group.Start, HighPartitionKey: tg.End}
}

func (g RangeGroup) clone() RangeGroup {
	return RangeGroup{ID: g.ID, Voters: slices.Clone(g.Voters), Start: g.Start}
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

// setGroups makes gs, sorted by start, the table's range descriptors.
func (t *table) setGroups(gs []RangeGroup) {
	out := make([]RangeGroup, len(gs))
	for i, g := range gs {
		out[i] = g.clone()
	}
	t.groups.Store(&out)
}

// rangeGroups returns the table's range descriptors, by start (none when
// its entities have no range group). They are shared: read-only.
func (t *table) rangeGroups() []RangeGroup {
	if gs := t.groups.Load(); gs != nil {
		return *gs
	}
	return nil
}

// groupOf returns the index in gs of the range holding PartitionKey pk.
func groupOf(gs []RangeGroup, pk string) int {
	i, _ := slices.BinarySearchFunc(gs, pk, func(g RangeGroup, pk string) int { return strings.Compare(g.Start, pk) })
	if i == len(gs) || gs[i].Start != pk {
		i--
	}
	return i
}

// tableGroup returns range i of gs as a TableGroup of t.
func (t *table) tableGroup(gs []RangeGroup, i int) TableGroup {
	tg := TableGroup{Account: t.account, Table: t.name, Group: gs[i].clone()}
	if i+1 < len(gs) {
		tg.End = gs[i+1].Start
	}
	return tg
}

// TableGroup returns the range group of a live table's first range (its
// only one, unless it was split): TableNotFound when there is no such
// table, the zero RangeGroup when its entities have no group. The voters
// are shared: the caller must not change them.
func (s *Store) TableGroup(account, name string) (RangeGroup, error) {
	return s.TableGroupFor(account, name, "")
}

// TableGroupFor returns the range group of a live table that holds the
// entities of PartitionKey pk, as TableGroup does.
func (s *Store) TableGroupFor(account, name, pk string) (RangeGroup, error) {
	t, err := s.acquireTable(account, name)
	if err != nil {
		return RangeGroup{}, err
	}
	defer t.release()
	gs := t.rangeGroups()
	if len(gs) == 0 {
		return RangeGroup{}, nil
	}
	return gs[groupOf(gs, pk)], nil
}

// TableRangeFor returns the range of a live table that holds
// PartitionKey pk, with its group; a table without range groups has
// none (the zero TableGroup).
func (s *Store) TableRangeFor(account, name, pk string) (TableGroup, error) {
	t, err := s.acquireTable(account, name)
	if err != nil {
		return TableGroup{}, err
	}
	defer t.release()
	gs := t.rangeGroups()
	if len(gs) == 0 {
		return TableGroup{}, nil
	}
	return t.tableGroup(gs, groupOf(gs, pk)), nil
}

// TableRanges returns the range groups of a live table, by start.
func (s *Store) TableRanges(account, name string) ([]TableGroup, error) {
	t, err := s.acquireTable(account, name)
	if err != nil {
		return nil, err
	}
	defer t.release()
	gs := t.rangeGroups()
	out := make([]TableGroup, len(gs))
	for i := range gs {
		out[i] = t.tableGroup(gs, i)
	}
	return out, nil
}

// GroupTable returns range group id, with its live table; ok is false
// when no live table's catalog entry names the group. An error is a
// failure to read the catalog (the group's table may not be open): the
// answer is unknown, and a caller must not act as if the group were not
// named.
func (s *Store) GroupTable(id uint64) (tg TableGroup, ok bool, err error) {
	t, ok, err := s.acquireGroupTable(id)
	if !ok || err != nil {
		return TableGroup{}, false, err
	}
	defer t.release()
	gs := t.rangeGroups()
	for i := range gs {
		if gs[i].ID == id {
			return t.tableGroup(gs, i), true, nil
		}
	}
	return TableGroup{}, false, nil // the table was split or dropped meanwhile
}

// TableGroups lists every range group of the live tables, by group id,
// as the catalog has them (read from disk: most tables may not be open).
// A failure to read the catalog lists what was read before it.
func (s *Store) TableGroups() []TableGroup {
	var out []TableGroup
	_ = s.EachTableGroup(func(tg TableGroup) bool {
		out = append(out, tg)
		return true
	})
	slices.SortFunc(out, func(a, b TableGroup) int { return cmp.Compare(a.Group.ID, b.Group.ID) })
	return out
}

// SetGroupVoters records new voters in the descriptor of range group
// group of a table: a cluster's system group applies it when the group's
// replicas are to move. A table without that group (dropped, or created
// again without it) is TableNotFound; voters must pass ValidVoters.
func (s *Store) SetGroupVoters(ctx context.Context, account, name string, group uint64, voters []uint64) error {
	if err := ValidVoters(voters); err != nil {
		return serviceErrorf(CodeInvalidInput, "The range group's voters are not valid.", "(%v)", err)
	}
	return s.editGroups(ctx, account, name, group, func(gs []RangeGroup, i int) ([]RangeGroup, error) {
		gs[i].Voters = slices.Clone(voters)
		return gs, nil
	})
}

// SplitTableRange splits the range of group group of a table at
// PartitionKey at, which must be inside the range and not its start: the
// range keeps the keys below at, and a new range from at on is given to
// group child, with the same voters. A cluster's system group applies it
// to record a split for routing; the group's own log carries the split of
// its data (SplitGroupSpan). A table without that group is
// TableNotFound; a key outside the range, or a child id in use, is
// InvalidInput.
func (s *Store) SplitTableRange(ctx context.Context, account, name string, group uint64, at string, child uint64) error {
	if child == 0 {
		return serviceErrorf(CodeInvalidInput, "The split is not valid.", "(group 0)")
	}
	switch t, inUse, err := s.acquireGroupTable(child); {
	case err != nil:
		return err
	case inUse:
		t.release()
		return serviceErrorf(CodeInvalidInput, "The split is not valid.", "(group %d is in use)", child)
	}
	return s.editGroups(ctx, account, name, group, func(gs []RangeGroup, i int) ([]RangeGroup, error) {
		if at <= gs[i].Start || (i+1 < len(gs) && at >= gs[i+1].Start) {
			return nil, serviceErrorf(CodeInvalidInput, "The split is not valid.", "(%q is not inside the range of group %d)", at, group)
		}
		return slices.Insert(gs, i+1, RangeGroup{ID: child, Voters: slices.Clone(gs[i].Voters), Start: at}), nil
	})
}

// editGroups changes the descriptors of a table that has range group
// group (edit gets a copy, and the index of that group) and records them
// in the catalog.
func (s *Store) editGroups(ctx context.Context, account, name string, group uint64, edit func(gs []RangeGroup, i int) ([]RangeGroup, error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.catMu.Lock()
	defer s.catMu.Unlock()
	t, err := s.acquireTableLocked(tableKey{account, strings.ToLower(name)})
	if err != nil {
		return err
	}
	defer t.release()
	gs := t.rangeGroups()
	i := slices.IndexFunc(gs, func(g RangeGroup) bool { return g.ID == group })
	if i < 0 {
		return serviceError(CodeTableNotFound, msgTableNotFound)
	}
	edited := make([]RangeGroup, len(gs))
	for k, g := range gs {
		edited[k] = g.clone()
	}
	if edited, err = edit(edited, i); err != nil {
		return err
	}
	b := s.db.NewBatch()
	b.Set(catalogKey(account, t.lower), encodeCatalogValue(t.id, edited, t.name))
	indexGroups(b, account, t.lower, gs, edited)
	if err := s.db.Apply(b, s.writeOptions(ctx, b)); err != nil {
		return fmt.Errorf("partition: change the range groups of table %q: %w", name, err)
	}
	t.setGroups(edited)
	for _, g := range gs {
		if !hasGroup(edited, g.ID) {
			s.groups.CompareAndDelete(g.ID, t)
		}
	}
	for _, g := range edited {
		s.groups.Store(g.ID, t)
	}
	return nil
}
