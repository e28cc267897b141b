package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tabuladb/tabula/export"
	"github.com/tabuladb/tabula/internal/edmtest"
	"github.com/tabuladb/tabula/internal/syncbuf"
	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
)

// readAllEntities reads every entity of every table of the store in dir.
func readAllEntities(t *testing.T, dir string) map[string][]*odata.Entity {
	t.Helper()
	s, err := partition.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	return edmtest.StoreEntities(t, s)
}

// TestExportImportCommands round-trips every Edm edge value through
// `tabula export` and `tabula import` as real processes on real files,
// exports chosen tables, and refuses a held store, a truncated file and a
// malformed one, naming the line.
func TestExportImportCommands(t *testing.T) {
	root := t.TempDir()
	src := filepath.Join(root, "src")
	s, err := partition.Open(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, name := range []string{"Edges", "Other"} {
		if _, err := s.CreateTable(ctx, "devstoreaccount1", name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.CreateTable(ctx, "second", "Edges"); err != nil {
		t.Fatal(err)
	}
	for _, e := range edmtest.EdgeEntities() {
		if _, err := s.InsertEntity(ctx, "devstoreaccount1", "Edges", e); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.InsertEntity(ctx, "second", "Edges", &odata.Entity{PartitionKey: "a", RowKey: "b"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	want := readAllEntities(t, src)

	out := filepath.Join(root, "all.jsonl")
	if code, stdout, stderr := tabula(t, "export", "--data", src, out); code != 0 || !strings.Contains(stdout, "exported 3 tables") {
		t.Fatalf("export: exit %d: %s%s", code, stdout, stderr)
	}
	dst := filepath.Join(root, "dst")
	if code, stdout, stderr := tabula(t, "import", "--data", dst, out); code != 0 {
		t.Fatalf("import: exit %d: %s%s", code, stdout, stderr)
	}
	edmtest.SameStores(t, readAllEntities(t, dst), want)
	if _, err := os.Stat(out + ".progress"); !os.IsNotExist(err) {
		t.Fatalf("a finished import left its progress file (%v)", err)
	}

	// Named tables only: "second/edges" is one table, "edges" two.
	one := filepath.Join(root, "one.jsonl")
	if code, stdout, stderr := tabula(t, "export", "--data", src, "--table", "second/edges", one); code != 0 || !strings.Contains(stdout, "exported 1 tables, 1 entities") {
		t.Fatalf("export --table: exit %d: %s%s", code, stdout, stderr)
	}
	if code, stdout, _ := tabula(t, "export", "--data", src, "--table", "edges", filepath.Join(root, "two.jsonl")); code != 0 || !strings.Contains(stdout, "exported 2 tables") {
		t.Fatalf("export --table edges: %s", stdout)
	}
	if code, _, stderr := tabula(t, "export", "--data", src, "--table", "nope", filepath.Join(root, "x.jsonl")); code != 1 || !strings.Contains(stderr, `no table "nope"`) {
		t.Fatalf("export of a missing table: exit %d: %s", code, stderr)
	}

	// A truncated file and a malformed one are refused before anything is
	// written, naming the line.
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	for _, c := range []struct {
		name, content, want string
	}{
		{"truncated", strings.Join(lines[:len(lines)-2], ""), fmt.Sprintf("line %d ", len(lines)-1)},
		{"cut mid-line", string(data[:len(data)-3]), fmt.Sprintf("line %d ", len(lines)-1)},
		{"malformed", strings.Replace(string(data), `"Edm.Int64","9223372036854775807"`, `"Edm.Int64",9223372036854775807`, 1), "want a string"},
	} {
		bad := filepath.Join(root, c.name+".jsonl")
		os.WriteFile(bad, []byte(c.content), 0o600)
		fresh := filepath.Join(root, "fresh-"+c.name)
		code, _, stderr := tabula(t, "import", "--data", fresh, bad)
		if code != 1 || !strings.Contains(stderr, c.want) || !strings.Contains(stderr, "nothing was imported") || !strings.Contains(stderr, "byte offset") {
			t.Fatalf("import of a %s file: exit %d, want 1 naming %q: %s", c.name, code, c.want, stderr)
		}
		if _, err := os.Stat(fresh); !os.IsNotExist(err) {
			t.Fatalf("a refused import created the store %s", fresh)
		}
	}

	// A store a server holds is refused, saying so.
	p := startServeEnv(t, []string{"TABULA_TEST_ADMIN_SERVE=admin"}, "--data", dst)
	if code, _, stderr := tabula(t, "export", "--data", dst, filepath.Join(root, "held.jsonl")); code != 1 || !strings.Contains(stderr, "held by a running server") {
		t.Fatalf("export of a held store: exit %d: %s", code, stderr)
	}
	if code, _, stderr := tabula(t, "import", "--data", dst, out); code != 1 || !strings.Contains(stderr, "held by a running server") {
		t.Fatalf("import into a held store: exit %d: %s", code, stderr)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(t)
}

// TestImportResumesAfterKill kills `tabula import` with SIGKILL once it has
// recorded progress, checks that the store holds whole batches only, and
// runs the import again: it resumes where the progress file says, and the
// store ends up holding exactly the file.
func TestImportResumesAfterKill(t *testing.T) {
	root := t.TempDir()
	in := filepath.Join(root, "big.jsonl")
	f, err := os.Create(in)
	if err != nil {
		t.Fatal(err)
	}
	w := export.NewWriter(f)
	w.Table("devstoreaccount1", "Big")
	const partitions, perPartition = 3000, 4
	for p := range partitions {
		for r := range perPartition {
			w.Entity(&odata.Entity{PartitionKey: fmt.Sprintf("p%05d", p), RowKey: fmt.Sprint(r), Properties: []odata.Property{{Name: "V", Value: odata.Int64Value(int64(p*10 + r))}}})
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()

	data := filepath.Join(root, "data")
	cmd := exec.Command(os.Args[0], "import", "--data", data, in)
	cmd.Env = append(os.Environ(), "TABULA_RUN_MAIN=1")
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	progress := in + ".progress"
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(progress); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("no progress file in 30 s: %s", stderr.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	b, err := os.ReadFile(progress)
	if err != nil {
		t.Fatalf("the progress file is gone: the import finished before the kill (%v)", err)
	}
	var prog importProgress
	if err := json.Unmarshal(b, &prog); err != nil {
		t.Fatal(err)
	}

	// Whole batches only, and at least what the progress file promises.
	got := readAllEntities(t, data)["devstoreaccount1/Big"]
	perPK := map[string]int{}
	for _, e := range got {
		perPK[e.PartitionKey]++
	}
	for pk, n := range perPK {
		if n != perPartition {
			t.Fatalf("partition %s holds %d of its %d entities after the kill: half a batch", pk, n, perPartition)
		}
	}
	if int64(len(got)) < prog.Entities || len(got) >= partitions*perPartition {
		t.Fatalf("after the kill the store holds %d entities; progress says %d are in, the file has %d", len(got), prog.Entities, partitions*perPartition)
	}

	code, stdout, errOut := tabula(t, "import", "--data", data, in)
	if code != 0 || !strings.Contains(stdout, fmt.Sprintf("resuming the import of %s at line %d", in, prog.NextLine)) {
		t.Fatalf("second import: exit %d: %s%s", code, stdout, errOut)
	}
	t.Logf("killed after %d of %d entities; %s", len(got), partitions*perPartition, stdout)
	got = readAllEntities(t, data)["devstoreaccount1/Big"]
	if len(got) != partitions*perPartition {
		t.Fatalf("after the resumed import the store holds %d entities, want %d", len(got), partitions*perPartition)
	}
	for i, e := range got {
		p, r := i/perPartition, i%perPartition
		if e.PartitionKey != fmt.Sprintf("p%05d", p) || e.RowKey != fmt.Sprint(r) || e.Properties[0].Value.Int64() != int64(p*10+r) {
			t.Fatalf("entity %d is %+v", i, e)
		}
	}
	if _, err := os.Stat(progress); !os.IsNotExist(err) {
		t.Fatalf("the finished import left its progress file")
	}
}
