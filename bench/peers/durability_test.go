package main

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/vfs"
)

// TestPowerLossTabula: every insert Tabula acknowledged before the cut is
// in the store reopened on the crash clone.
func TestPowerLossTabula(t *testing.T) {
	for seed := uint64(1); seed <= 2; seed++ {
		p := powerLossTabula(300, 4, seed)
		if p.Error != "" || p.Acknowledged < 300 || p.Survived != p.Acknowledged {
			t.Fatalf("seed %d: %+v", seed, p)
		}
	}
}

// TestCrashCloneLosesUnsyncedWrites is the power-loss test's control: the
// same cut does lose writes that were acknowledged without an fsync, so a
// clean result above means something.
func TestCrashCloneLosesUnsyncedWrites(t *testing.T) {
	mem := vfs.NewMem()
	db, err := lsm.Open("/db", &lsm.Options{FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if err := db.Set(fmt.Appendf(nil, "k%03d", i), []byte("v"), &lsm.WriteOptions{Sync: false}); err != nil {
			t.Fatal(err)
		}
	}
	clone := mem.CrashClone(nil)
	db.Close()
	r, err := lsm.Open("/db", &lsm.Options{FS: clone})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	survived := 0
	for i := range 100 {
		if _, err := r.Get(fmt.Appendf(nil, "k%03d", i)); err == nil {
			survived++
		}
	}
	if survived == 100 {
		t.Fatal("all 100 unsynced writes survived the crash clone: the power-loss test could not tell")
	}
}

// TestDurabilityTable: the report states per system what an
// acknowledgement means, the kill -9 result, and the power loss measured
// for Tabula and computed for the emulator from its autosave interval
// and measured insert rate.
func TestDurabilityTable(t *testing.T) {
	rep := fixedReport()
	md := rep.markdown("")
	for _, want := range []string{
		"| tabula | fsynced: `tabula serve`",
		"| 100 / 100 / **0** | 2000 / 2000 / **0**, measured on a crash clone",
		"| azurite | in memory, not on disk: Azurite 3.35.0",
		"`autosaveInterval: 5000` in `node_modules/azurite/dist/src/table/persistence/LokiTableMetadataStore.js`",
		"| 100 / 40 / **60** | computed, not measured: up to **5000** lost (5 s autosave interval × 1000 inserts/s, its median on insert)",
		"**kill -9 = a process crash**", "**Crash clone = a power loss**",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	pl := rep.PowerLoss[1]
	if pl.Rate != 1000 || pl.Lost != 5000 {
		t.Errorf("computed power loss: %+v", pl)
	}
	// No valid insert rate: no figure, and it says so.
	rep.Runs[3].Errors = 1
	rep.summarize()
	if pl := rep.PowerLoss[1]; !math.IsNaN(float64(pl.Lost)) || !strings.Contains(rep.markdown(""), "no valid insert rate measured") {
		t.Errorf("computed power loss from an invalid insert row: %+v", pl)
	}
}
