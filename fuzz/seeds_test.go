package fuzz

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// checkSeedFiles compares a target's committed seed corpus with what its
// generator produces now, so a format change cannot leave the corpus
// silently stale. With TABULA_WRITE_FUZZ_SEEDS=1 it rewrites the files.
func checkSeedFiles(t *testing.T, target string, seeds map[string][]byte) {
	t.Helper()
	dir := filepath.Join("testdata", "fuzz", target)
	rewrite := os.Getenv("TABULA_WRITE_FUZZ_SEEDS") != ""
	if rewrite {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range seeds {
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%+q)\n", data)
		path := filepath.Join(dir, name)
		if rewrite {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Errorf("%s is missing or stale (err %v): run TABULA_WRITE_FUZZ_SEEDS=1 go test ./fuzz -run %s", path, err, t.Name())
		}
	}
}
