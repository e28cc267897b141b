package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/tabuladb/tabula/partition"
)

// tabula runs the tabula command as a real process and returns its exit
// code, stdout and stderr.
func tabula(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "TABULA_RUN_MAIN=1", "AZURITE_ACCOUNTS=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

// backupWriter is one client of the load: operation i is an insert of
// RowKey i in partition "w<n>", or every third one a batch of 5 inserts
// in partition "w<n>-b<i>". It runs them one after the other, so the
// writes present in any consistent copy are exactly a prefix of them.
type backupWriter struct {
	n                 int
	mu                sync.Mutex
	acked, attempting int // ops 0..acked-1 acknowledged; op attempting sent or about to be
}

func (w *backupWriter) run(c *aztables.Client, stop <-chan struct{}, errs chan<- error) {
	ctx := context.Background()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		w.mu.Lock()
		w.attempting = i
		w.mu.Unlock()
		var err error
		if i%3 == 2 {
			pk := fmt.Sprintf("w%d-b%06d", w.n, i)
			actions := make([]aztables.TransactionAction, 5)
			for j := range actions {
				actions[j] = aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: entityJSON(pk, fmt.Sprint(j), i)}
			}
			_, err = c.SubmitTransaction(ctx, actions, nil)
		} else {
			_, err = c.AddEntity(ctx, entityJSON(fmt.Sprintf("w%d", w.n), fmt.Sprintf("%06d", i), i), nil)
		}
		if err != nil {
			errs <- fmt.Errorf("writer %d op %d: %w", w.n, i, err)
			return
		}
		w.mu.Lock()
		w.acked = i + 1
		w.mu.Unlock()
	}
}

func (w *backupWriter) state() (acked, attempting int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked, w.attempting
}

// presentOps returns, for writer n, which of ops 0..limit-1 the store
// holds (a batch counts if any of its entities is there) and fails if a
// batch is there only in part.
func presentOps(t *testing.T, s *partition.Store, n, limit int) []bool {
	t.Helper()
	ctx := context.Background()
	out := make([]bool, limit)
	for i := range limit {
		if i%3 == 2 {
			pk := fmt.Sprintf("w%d-b%06d", n, i)
			count := 0
			for j := range 5 {
				if _, err := s.GetEntity(ctx, "devstoreaccount1", "load", pk, fmt.Sprint(j)); err == nil {
					count++
				}
			}
			if count != 0 && count != 5 {
				t.Fatalf("batch %s: %d of its 5 entities restored", pk, count)
			}
			out[i] = count == 5
		} else {
			_, err := s.GetEntity(ctx, "devstoreaccount1", "load", fmt.Sprintf("w%d", n), fmt.Sprintf("%06d", i))
			out[i] = err == nil
		}
	}
	return out
}

// TestBackupOnlineUnderLoad backs up a server's store with `tabula backup`
// while clients write to it, then restores the backup with `tabula
// restore`, checks it with `tabula verify`, and opens it: for each
// writer, the operations it holds must be exactly its first n, all of
// them whole, with n at least what was acknowledged before the backup
// began and at most what had been sent when it ended.
func TestBackupOnlineUnderLoad(t *testing.T) {
	root := t.TempDir()
	data := filepath.Join(root, "data")
	p := startServe(t, "--addr", "127.0.0.1:0", "--data", data)
	c := tableClient(t, p.connStr, "load")
	if _, err := c.CreateTable(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	const writers = 3
	ws := make([]*backupWriter, writers)
	stop := make(chan struct{})
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for i := range ws {
		ws[i] = &backupWriter{n: i}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ws[i].run(tableClient(t, p.connStr, "load"), stop, errs)
		}()
	}
	waitAcked := func(n int) {
		deadline := time.Now().Add(30 * time.Second)
		for _, w := range ws {
			for a, _ := w.state(); a < n; a, _ = w.state() {
				if time.Now().After(deadline) {
					t.Fatalf("writer %d acknowledged only %d operations: %s", w.n, a, p.stderr)
				}
				select {
				case err := <-errs:
					t.Fatal(err)
				case <-time.After(5 * time.Millisecond):
				}
			}
		}
	}
	waitAcked(60)
	before := make([]int, writers)
	for i, w := range ws {
		before[i], _ = w.state()
	}
	out := filepath.Join(root, "backup")
	code, stdout, stderr := tabula(t, "backup", "--data", data, out)
	after := make([]int, writers)
	for i, w := range ws {
		_, after[i] = w.state()
	}
	if code != 0 {
		t.Fatalf("tabula backup: exit %d: %s\nserver: %s", code, stderr, p.stderr)
	}
	if !strings.Contains(stdout, "online, through the running server") {
		t.Fatalf("the backup was not taken online: %s", stdout)
	}
	waitAcked(after[0] + 30) // the load goes on after the backup
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t); code != 0 {
		t.Fatalf("server exit %d: %s", code, p.stderr)
	}

	restored := filepath.Join(root, "restored")
	if code, _, stderr := tabula(t, "restore", out, restored); code != 0 {
		t.Fatalf("tabula restore: exit %d: %s", code, stderr)
	}
	if code, stdout, stderr := tabula(t, "verify", "--data", restored); code != 0 || strings.Contains(stdout, "note:") {
		t.Fatalf("tabula verify of the restored store: exit %d: %s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := tabula(t, "verify", "--data", out); code != 0 || !strings.Contains(stdout, "backup index:") {
		t.Fatalf("tabula verify of the backup: exit %d: %s%s", code, stdout, stderr)
	}
	s, err := partition.Open(restored, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, w := range ws {
		acked, _ := w.state()
		present := presentOps(t, s, i, acked+1)
		n := 0
		for n < len(present) && present[n] {
			n++
		}
		for j := n; j < len(present); j++ {
			if present[j] {
				t.Fatalf("writer %d: op %d restored but op %d is not: not a consistent copy", i, j, n)
			}
		}
		if n < before[i] || n > after[i]+1 {
			t.Fatalf("writer %d: the backup holds ops 0..%d; %d were acknowledged before it began and %d sent when it ended", i, n-1, before[i], after[i]+1)
		}
		t.Logf("writer %d: backup holds %d ops (acknowledged before: %d, sent by the end: %d, acknowledged in all: %d)", i, n, before[i], after[i]+1, acked)
	}
	// The live store kept every write.
	live, err := partition.Open(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	for i, w := range ws {
		acked, _ := w.state()
		for j, ok := range presentOps(t, live, i, acked) {
			if !ok {
				t.Fatalf("the live store lost writer %d's acknowledged op %d", i, j)
			}
		}
	}
}

// TestBackupOfflineAndRefusals: with no server the store is opened for
// the backup; a server without an admin socket is named; an existing
// non-empty OUT and a directory without a store are refused.
func TestBackupOfflineAndRefusals(t *testing.T) {
	root := t.TempDir()
	data := filepath.Join(root, "data")
	s, err := partition.Open(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.CreateTable(ctx, "devstoreaccount1", "tbl"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(root, "b1")
	code, stdout, stderr := tabula(t, "backup", "--data", data, out)
	if code != 0 || !strings.Contains(stdout, "no server held the store") {
		t.Fatalf("offline backup: exit %d: %s%s", code, stdout, stderr)
	}
	if code, _, stderr := tabula(t, "backup", "--data", data, out); code != 1 || !strings.Contains(stderr, "not empty") {
		t.Fatalf("backup into a non-empty directory: exit %d: %s", code, stderr)
	}
	if code, _, stderr := tabula(t, "backup", "--data", filepath.Join(root, "nothing"), filepath.Join(root, "b2")); code != 1 || !strings.Contains(stderr, "holds no store") {
		t.Fatalf("backup of a missing store: exit %d: %s", code, stderr)
	}

	// A process that holds the store without an admin socket: this one.
	held, err := partition.Open(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr = tabula(t, "backup", "--data", data, filepath.Join(root, "b3"))
	if code != 1 || !strings.Contains(stderr, "offers no admin socket") {
		t.Fatalf("backup of a store held without an admin socket: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(root, "b3")); !os.IsNotExist(err) {
		t.Fatalf("a failed backup left %s behind (%v)", filepath.Join(root, "b3"), err)
	}
	if matches, _ := filepath.Glob(filepath.Join(root, ".b3.partial-*")); len(matches) > 0 {
		t.Fatalf("a failed backup left %v behind", matches)
	}
	if code, _, stderr := tabula(t, "verify", "--data", data); code != 1 || !strings.Contains(stderr, "held by a running server") {
		t.Fatalf("verify of a held store: exit %d: %s", code, stderr)
	}
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}

	restored := filepath.Join(root, "r")
	if code, _, stderr := tabula(t, "restore", out, restored); code != 0 {
		t.Fatalf("restore: exit %d: %s", code, stderr)
	}
	if code, _, stderr := tabula(t, "restore", out, restored); code != 1 || !strings.Contains(stderr, "not empty") {
		t.Fatalf("restore over a non-empty directory: exit %d: %s", code, stderr)
	}
	rs, err := partition.Open(restored, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	if _, err := rs.GetTable(ctx, "devstoreaccount1", "tbl"); err != nil {
		t.Fatalf("the restored store lacks the table: %v", err)
	}
}

// TestRestoreRefusesDamagedBackups damages a backup in several ways and
// checks that restore refuses each, naming the file (and the line or
// offset), and creates nothing.
func TestRestoreRefusesDamagedBackups(t *testing.T) {
	root := t.TempDir()
	data := filepath.Join(root, "data")
	s, err := partition.Open(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.CreateTable(ctx, "devstoreaccount1", "tbl"); err != nil {
		t.Fatal(err)
	}
	if err := s.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(root, "good")
	if code, _, stderr := tabula(t, "backup", "--data", data, good); code != 0 {
		t.Fatalf("backup: %s", stderr)
	}
	copyDir := func(name string) string {
		dst := filepath.Join(root, name)
		if err := os.CopyFS(dst, os.DirFS(good)); err != nil {
			t.Fatal(err)
		}
		return dst
	}
	firstOf := func(dir, pattern string) string {
		m, _ := filepath.Glob(filepath.Join(dir, pattern))
		if len(m) == 0 {
			t.Fatalf("no %s in %s", pattern, dir)
		}
		return m[0]
	}
	for _, tc := range []struct {
		name   string
		damage func(dir string) string // returns the file to be named
		want   string
	}{
		{"flipped table byte", func(dir string) string {
			f := firstOf(dir, "*.sst")
			b, _ := os.ReadFile(f)
			b[5] ^= 1
			os.WriteFile(f, b, 0o600)
			return f
		}, "offset"},
		{"truncated table", func(dir string) string {
			f := firstOf(dir, "*.sst")
			info, _ := os.Stat(f)
			os.Truncate(f, info.Size()-10)
			return f
		}, "truncated"},
		{"truncated index", func(dir string) string {
			f := filepath.Join(dir, "BACKUP")
			b, _ := os.ReadFile(f)
			os.WriteFile(f, b[:len(b)-20], 0o600)
			return f
		}, "line"},
		{"edited index", func(dir string) string {
			f := filepath.Join(dir, "BACKUP")
			b, _ := os.ReadFile(f)
			os.WriteFile(f, bytes.Replace(b, []byte("seq "), []byte("seq 1"), 1), 0o600)
			return f
		}, "checksum mismatch"},
		{"missing manifest", func(dir string) string {
			f := firstOf(dir, "MANIFEST-*")
			os.Remove(f)
			return f
		}, "missing"},
		{"extra file", func(dir string) string {
			f := filepath.Join(dir, "999999.sst")
			os.WriteFile(f, []byte("x"), 0o600)
			return f
		}, "not listed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(strings.ReplaceAll(tc.name, " ", "-"))
			file := tc.damage(dir)
			dst := filepath.Join(root, "restored-"+strings.ReplaceAll(tc.name, " ", "-"))
			code, _, stderr := tabula(t, "restore", dir, dst)
			if code != 1 || !strings.Contains(stderr, file) || !strings.Contains(stderr, tc.want) {
				t.Fatalf("restore of a backup with a %s: exit %d, want 1 naming %s and %q: %s", tc.name, code, file, tc.want, stderr)
			}
			if _, err := os.Stat(dst); !os.IsNotExist(err) {
				t.Fatalf("a refused restore created %s", dst)
			}
			if m, _ := filepath.Glob(filepath.Join(root, ".restored-*")); len(m) > 0 {
				t.Fatalf("a refused restore left %v", m)
			}
		})
	}
}

// TestVerifyCommand runs `tabula verify` on a clean store and on one with
// a flipped byte in a table.
func TestVerifyCommand(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	s, err := partition.Open(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateTable(context.Background(), "devstoreaccount1", "tbl"); err != nil {
		t.Fatal(err)
	}
	if err := s.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := tabula(t, "verify", "--data", data); code != 0 || !strings.HasPrefix(stdout, "ok: ") {
		t.Fatalf("verify of a clean store: exit %d: %s%s", code, stdout, stderr)
	}
	m, _ := filepath.Glob(filepath.Join(data, "*.sst"))
	if len(m) == 0 {
		t.Fatal("no table")
	}
	b, _ := os.ReadFile(m[0])
	b[len(b)/2] ^= 0x80
	if err := os.WriteFile(m[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := tabula(t, "verify", "--data", data)
	if code != 1 || !strings.Contains(stderr, m[0]+": offset ") {
		t.Fatalf("verify of a damaged store: exit %d, want 1 naming %s and an offset: %s", code, m[0], stderr)
	}
}
