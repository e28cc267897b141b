package lsm

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"sort"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/vfs"
)

// sortedKeys returns want's keys within [lower, upper) in order.
func sortedKeys(want map[string]string, lower, upper []byte) []string {
	var keys []string
	for k := range want {
		if lower != nil && bytes.Compare([]byte(k), lower) < 0 {
			continue
		}
		if upper != nil && bytes.Compare([]byte(k), upper) >= 0 {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// mutation is one Set (del false) or Delete of a batch.
type mutation struct {
	key, value string
	del        bool
}

// applyMutations applies a batch to a model.
func applyMutations(m model, ops []mutation) {
	for _, op := range ops {
		if op.del {
			delete(m, op.key)
		} else {
			m[op.key] = op.value
		}
	}
}

// scanAll reads a DB's whole contents with an iterator.
func scanAll(t *testing.T, db *DB) model { return scanRange(t, db, nil, nil) }

// scanRange reads the keys in [lower, upper) with an iterator.
func scanRange(t *testing.T, db *DB, lower, upper []byte) model {
	t.Helper()
	it := db.NewIter(&IterOptions{LowerBound: lower, UpperBound: upper})
	defer it.Close()
	got := model{}
	for ok := it.First(); ok; ok = it.Next() {
		got[string(it.Key())] = string(it.Value())
	}
	if err := it.Error(); err != nil {
		t.Fatalf("scan: %v", err)
	}
	return got
}

// matchPrefix finds the p in [lo, hi] for which the DB holds exactly the
// state after the first p batches, and fails the test if there is none:
// every batch up to lo is there, none after hi, and none partly.
func matchPrefix(t *testing.T, what string, db *DB, batches [][]mutation, lo, hi int) int {
	t.Helper()
	return matchPrefixOf(t, what, scanAll(t, db), batches, lo, hi)
}

// matchPrefixOf is matchPrefix on contents already read.
func matchPrefixOf(t *testing.T, what string, got model, batches [][]mutation, lo, hi int) int {
	t.Helper()
	want := model{}
	for p := 0; p <= hi; p++ {
		if p > 0 {
			applyMutations(want, batches[p-1])
		}
		if p >= lo && maps.Equal(got, want) {
			return p
		}
	}
	// Describe the difference with the longest acceptable state.
	var diff []string
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			diff = append(diff, fmt.Sprintf("%s: have %.16q want %.16q", k, g, v))
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			diff = append(diff, fmt.Sprintf("%s: have %.16q, want none", k, v))
		}
	}
	if len(diff) > 5 {
		diff = append(diff[:5], "...")
	}
	t.Fatalf("%s: the DB holds no prefix of batches %d..%d of %d; against the longest: %s",
		what, lo, hi, len(batches), strings.Join(diff, "; "))
	return 0
}

// readAll returns name's contents.
func readAll(t *testing.T, fs vfs.FS, name string) []byte {
	t.Helper()
	f, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// writeFile replaces name's contents with data, synced.
func writeFile(t *testing.T, fs vfs.FS, name string, data []byte) {
	t.Helper()
	f, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
