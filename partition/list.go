package partition

import "errors"

// TableRef names a table of an account, as it was created.
type TableRef struct {
	Account, Name string
}

// AllTables lists every table of every account, ordered by account and
// then by lower-case name (QueryTables' order within an account). It is
// for tools that walk the whole store, such as tabula export.
func (s *Store) AllTables() ([]TableRef, error) {
	var out []TableRef
	err := s.scanCatalog(func(e catalogEntry) error {
		out = append(out, TableRef{Account: e.account, Name: e.name})
		return nil
	})
	return out, err
}

// CatalogTable is a live table with its range groups (none for a table
// whose entities have no group), by start.
type CatalogTable struct {
	TableRef
	Groups []TableGroup
}

// EachTableGroup calls fn with every range group of the live tables, in
// the catalog's order (by account and table), until fn returns false. It
// reads the catalog as EachCatalogTable does: a cluster's placement
// controller walks every group each round, and a list of them all would
// grow with the cluster.
func (s *Store) EachTableGroup(fn func(TableGroup) bool) error {
	return s.EachCatalogTable(func(ct CatalogTable) bool {
		for _, tg := range ct.Groups {
			if !fn(tg) {
				return false
			}
		}
		return true
	})
}

// EachCatalogTable calls fn with every live table and its range groups,
// in AllTables' order, until fn returns false. It reads the catalog,
// holding only the entry it is at, and opens no table, so a cluster
// node's periodic reports neither cycle every table of the cluster
// through the store's open tables nor list them all at once.
func (s *Store) EachCatalogTable(fn func(CatalogTable) bool) error {
	err := s.scanCatalog(func(e catalogEntry) error {
		ct := CatalogTable{TableRef: TableRef{Account: e.account, Name: e.name}}
		t := table{account: e.account, name: e.name}
		for i := range e.groups {
			ct.Groups = append(ct.Groups, t.tableGroup(e.groups, i))
		}
		if !fn(ct) {
			return errStopWalk
		}
		return nil
	})
	if errors.Is(err, errStopWalk) {
		return nil
	}
	return err
}

// errStopWalk ends a catalog walk whose caller has seen enough.
var errStopWalk = errors.New("partition: walk stopped")

// Catalog lists every live table with its range groups, in AllTables'
// order (EachCatalogTable, collected).
func (s *Store) Catalog() ([]CatalogTable, error) {
	var out []CatalogTable
	err := s.EachCatalogTable(func(ct CatalogTable) bool {
		out = append(out, ct)
		return true
	})
	return out, err
}
