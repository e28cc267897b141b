package main

import (
	"errors"
	"strings"
	"testing"
)

// TestDriveCountsFailures: a failed operation adds no entities, and the
// phase's run records its errors and the first one's description.
func TestDriveCountsFailures(t *testing.T) {
	res := drive(2, 0, 100, func(w, i int) (int, bool, error) {
		switch i % 4 {
		case 1:
			return 10, false, nil // a refusal the op did not describe
		case 3:
			return 10, false, errors.New("HTTP 503: busy")
		}
		return 10, true, nil
	})
	if res.ops != 100 || res.errors != 50 || res.entities != 500 || res.firstErr == nil {
		t.Fatalf("drive: %d ops, %d errors, %d entities, first error %v", res.ops, res.errors, res.entities, res.firstErr)
	}
	run := res.run("s", "w", 0)
	if run.Errors != 50 || run.FirstError == "" || run.Error != "" {
		t.Fatalf("run: %+v", run)
	}
	all := drive(1, 0, 3, func(w, i int) (int, bool, error) { return 1, false, errors.New("connection refused") })
	if run := all.run("s", "w", 0); run.Entities != 0 || !strings.Contains(run.Error, "connection refused") {
		t.Fatalf("a phase in which every operation failed: %+v", run)
	}
}
