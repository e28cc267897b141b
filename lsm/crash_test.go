package lsm

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	crashChildEnv = "TABULA_LSM_CRASH_CHILD_DIR"
	lockChildEnv  = "TABULA_LSM_LOCK_CHILD_DIR"
)

// The crash workload: batch n sets crashBatchKeys keys of its own, sets
// every shared key to its value, and deletes the keys batch n-crashDeleteLag
// set. So after recovery to batch m, exactly batches m-crashDeleteLag+1..m
// have keys, and the shared keys all carry m.
const (
	crashBatchKeys  = 8
	crashSharedKeys = 3
	crashDeleteLag  = 4
)

func crashKey(batch, i int) []byte { return fmt.Appendf(nil, "b%08d/k%02d", batch, i) }

func crashSharedKey(i int) []byte { return fmt.Appendf(nil, "shared%d", i) }

func crashValue(batch int) []byte { return fmt.Appendf(nil, "batch%d-%0200d", batch, batch) }

// crashValueBatch returns the batch number a value of the workload carries.
func crashValueBatch(v string) (int, bool) {
	s, ok := strings.CutPrefix(v, "batch")
	if !ok {
		return 0, false
	}
	s, _, ok = strings.Cut(s, "-")
	n, err := strconv.Atoi(s)
	return n, ok && err == nil && string(crashValue(n)) == v
}

// TestMain lets the test binary double as the crash test's child process.
func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir)
		return
	}
	if dir := os.Getenv(lockChildEnv); dir != "" {
		// Try to open a DB another process may hold, and say what happened.
		db, err := Open(dir, nil)
		if err != nil {
			fmt.Println("refused:", err)
			return
		}
		db.Close()
		fmt.Println("opened")
		return
	}
	os.Exit(m.Run())
}

// crashChild applies synced batches forever, printing "ack N" after batch N
// is acknowledged, until it is killed. Besides its own keys, each batch
// overwrites the shared keys and deletes an older batch's keys, so
// recovery has overwrites and deletions to get right too.
func crashChild(dir string) {
	db, err := Open(dir, smallOptions())
	if err != nil {
		fmt.Println("open error:", err)
		os.Exit(2)
	}
	start, _ := strconv.Atoi(os.Getenv("TABULA_LSM_CRASH_START"))
	out := bufio.NewWriter(os.Stdout)
	for n := start; ; n++ {
		b := db.NewBatch()
		val := crashValue(n)
		for i := range crashBatchKeys {
			b.Set(crashKey(n, i), val)
		}
		for i := range crashSharedKeys {
			b.Set(crashSharedKey(i), val)
		}
		if old := n - crashDeleteLag; old >= 0 {
			for i := range crashBatchKeys {
				b.Delete(crashKey(old, i))
			}
		}
		if err := db.Apply(b, &WriteOptions{Sync: true}); err != nil {
			fmt.Println("apply error:", err)
			os.Exit(2)
		}
		fmt.Fprintf(out, "ack %d\n", n)
		out.Flush()
	}
}

// TestCrashRecovery kills a writing child process with SIGKILL at random
// moments and checks after each kill that the DB holds exactly the state
// after some batch at or past the last acknowledged one (see
// checkCrashState).
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs child processes")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	next := 0
	deadline := time.Now().Add(20 * time.Second)
	rounds, checked := 0, 0
	for round := 0; round < 8 && time.Now().Before(deadline); round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, fmt.Sprintf("TABULA_LSM_CRASH_START=%d", next))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		acked := -1
		lines := make(chan string)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		killAt := time.After(time.Duration(200+rng.IntN(600)) * time.Millisecond)
	read:
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					break read
				}
				n, found := strings.CutPrefix(line, "ack ")
				if !found {
					t.Fatalf("child: %s", line)
				}
				acked, _ = strconv.Atoi(n)
			case <-killAt:
				cmd.Process.Signal(syscall.SIGKILL)
				killAt = nil
			}
		}
		cmd.Wait()
		if acked < next {
			t.Logf("round %d: child acknowledged nothing before the kill", round)
		}

		db := openTestDB(t, dir, smallOptions())
		got := scanAll(t, db)
		recovered := checkCrashState(t, round, got, acked, next-1)
		// Point lookups must agree with the scan, tombstones included.
		for n := recovered - crashDeleteLag; n <= recovered+1; n++ {
			for i := range crashBatchKeys {
				checkCrashGet(t, round, db, got, crashKey(n, i))
			}
		}
		for i := range crashSharedKeys {
			checkCrashGet(t, round, db, got, crashSharedKey(i))
		}
		checked += len(got)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		next = recovered + 1
		rounds++
	}
	t.Logf("%d crash rounds, %d recovered keys checked, %d batches written", rounds, checked, next)
	if rounds < 2 || next == 0 {
		t.Fatalf("crash test ran %d rounds and %d batches: not enough to mean anything", rounds, next)
	}
}

// checkCrashState checks the contents of a DB the crash workload was killed
// on, given the last batch the child acknowledged (acked) and the batch the
// previous round recovered to (prev), each -1 for none, and returns the
// batch m it recovered to. The shared keys must all carry the same batch,
// m, no older than acked or prev: a batch that was acknowledged, or was
// seen recovered, cannot be undone. The batch keys must be those of
// batches m-crashDeleteLag+1..m, each batch's all present: none missing
// (lost), none of a later batch (its sets applied without its shared
// overwrites) and none of an older batch (a delete not applied).
func checkCrashState(t *testing.T, round int, got model, acked, prev int) int {
	t.Helper()
	m := -1
	for i := range crashSharedKeys {
		k := string(crashSharedKey(i))
		n := -1
		if v, ok := got[k]; ok {
			if n, ok = crashValueBatch(v); !ok {
				t.Fatalf("round %d: %s holds %.24q, no batch's value", round, k, v)
			}
		}
		if i > 0 && n != m {
			t.Fatalf("round %d: a batch is partly visible: %s holds batch %d, %s batch %d", round, crashSharedKey(0), m, k, n)
		}
		m = n
	}
	present := map[int]int{}
	for k, v := range got {
		if strings.HasPrefix(k, "shared") {
			continue
		}
		var n, i int
		if _, err := fmt.Sscanf(k, "b%d/k%d", &n, &i); err != nil || string(crashKey(n, i)) != k {
			t.Fatalf("round %d: key %q was never written", round, k)
		}
		if vn, ok := crashValueBatch(v); !ok || vn != n {
			t.Fatalf("round %d: %s holds %.24q, not batch %d's value", round, k, v, n)
		}
		present[n]++
	}
	for n, c := range present {
		switch {
		case c != crashBatchKeys:
			t.Fatalf("round %d: batch %d partly visible or partly deleted: %d of its %d keys", round, n, c, crashBatchKeys)
		case n > m:
			t.Fatalf("round %d: batch %d partly visible: its keys are there, but the shared keys hold batch %d", round, n, m)
		case n <= m-crashDeleteLag:
			t.Fatalf("round %d: batch %d partly visible: it is applied (shared keys hold batch %d) but its delete of batch %d's keys is not", round, n+crashDeleteLag, m, n)
		}
	}
	for n := max(0, m-crashDeleteLag+1); n <= m; n++ {
		if present[n] == 0 {
			what := "durable"
			if n <= acked {
				what = "acknowledged"
			}
			t.Fatalf("round %d: %s batch %d lost (shared keys hold batch %d)", round, what, n, m)
		}
	}
	if lo := max(acked, prev); m < lo {
		t.Fatalf("round %d: shared keys hold batch %d, older than batch %d (acknowledged %d, recovered before %d)", round, m, lo, acked, prev)
	}
	return m
}

// checkCrashGet checks that Get of key agrees with the scanned contents.
func checkCrashGet(t *testing.T, round int, db *DB, got model, key []byte) {
	t.Helper()
	v, err := db.Get(key)
	want, ok := got[string(key)]
	switch {
	case !ok && !errors.Is(err, ErrNotFound):
		t.Fatalf("round %d: Get(%s) = %.24q, %v; the scan did not show it", round, key, v, err)
	case ok && (err != nil || string(v) != want):
		t.Fatalf("round %d: Get(%s) = %.24q, %v; the scan showed %.24q", round, key, v, err, want)
	}
}

// TestSecondProcessCannotOpen opens a DB and checks that another process is
// refused the same directory, and gets it once the DB is closed.
func TestSecondProcessCannotOpen(t *testing.T) {
	dir := t.TempDir()
	tryOpen := func() string {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), lockChildEnv+"="+dir)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("child: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	db := openTestDB(t, dir, nil)
	if got := tryOpen(); !strings.HasPrefix(got, "refused:") || !strings.Contains(got, "LOCK") {
		t.Fatalf("second process while the DB is open: %q", got)
	}
	db.Close()
	if got := tryOpen(); got != "opened" {
		t.Fatalf("second process after Close: %q", got)
	}
}
