package partition

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/lsm"
)

// TestOpenRefusesNewerLayoutVersion checks that a store whose key layout
// a newer build recorded is refused, naming the version found and the one
// this build reads, and that the refusal leaves the record as it was, so
// the newer build can still open its store.
func TestOpenRefusesNewerLayoutVersion(t *testing.T) {
	e := newEnv(t, nil)
	e.createTable("layouttable")
	if err := e.s.Close(); err != nil {
		t.Fatal(err)
	}
	e.s = nil

	lo := e.opts.LSM
	lo.Split = PrefixLen
	layout := func(db *lsm.DB) uint64 {
		t.Helper()
		v, err := db.Get(metaKey(metaLayout))
		if err != nil {
			t.Fatalf("layout version record: %v", err)
		}
		ver, n := binary.Uvarint(v)
		if n != len(v) {
			t.Fatalf("layout version record %x is not one uvarint", v)
		}
		return ver
	}
	// Record a newer version the way a newer build would: through the
	// engine, where this build wrote its own.
	db, err := lsm.Open("db", &lo)
	if err != nil {
		t.Fatal(err)
	}
	if got := layout(db); got != layoutVersion {
		t.Fatalf("a new store records layout version %d, want %d", got, layoutVersion)
	}
	newer := uint64(layoutVersion + 1)
	if err := db.Set(metaKey(metaLayout), binary.AppendUvarint(nil, newer), &lsm.WriteOptions{Sync: true}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s, err := Open("db", &e.opts)
	if err == nil {
		s.Close()
		t.Fatalf("a store of layout version %d opened; this build reads %d", newer, layoutVersion)
	}
	if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("version %d", newer)) || !strings.Contains(msg, fmt.Sprint(layoutVersion)) {
		t.Fatalf("error %q does not name version %d and this build's %d", msg, newer, layoutVersion)
	}

	db, err = lsm.Open("db", &lo)
	if err != nil {
		t.Fatalf("the refused Open left the engine unopenable: %v", err)
	}
	defer db.Close()
	if got := layout(db); got != newer {
		t.Fatalf("the refused Open changed the layout version to %d", got)
	}
}
