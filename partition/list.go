package partition

import (
	"cmp"
	"slices"
	"strings"
)

// TableRef names a table of an account, as it was created.
type TableRef struct {
	Account, Name string
}

// AllTables lists every table of every account, ordered by account and
// then by lower-case name (QueryTables' order within an account). It is
// for tools that walk the whole store, such as tabula export.
func (s *Store) AllTables() []TableRef {
	var out []TableRef
	s.tables.Range(func(_, v any) bool {
		t := v.(*table)
		out = append(out, TableRef{Account: t.account, Name: t.name})
		return true
	})
	slices.SortFunc(out, func(a, b TableRef) int {
		if c := cmp.Compare(a.Account, b.Account); c != 0 {
			return c
		}
		return cmp.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name))
	})
	return out
}
