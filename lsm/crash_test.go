package lsm

import (
	"bufio"
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

// crashBatchKeys is the number of keys each batch of the crash workload
// writes; they all carry the batch's number.
const crashBatchKeys = 8

func crashKey(batch, i int) []byte { return fmt.Appendf(nil, "b%08d/k%02d", batch, i) }

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
// is acknowledged, until it is killed. Batches also overwrite a few shared
// keys and delete an older batch's marker, so recovery sees overwrites and
// deletions too.
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
		val := fmt.Appendf(nil, "batch%d-%0200d", n, n)
		for i := range crashBatchKeys {
			b.Set(crashKey(n, i), val)
		}
		b.Set(fmt.Appendf(nil, "shared%d", n%5), val)
		if err := db.Apply(b, &WriteOptions{Sync: true}); err != nil {
			fmt.Println("apply error:", err)
			os.Exit(2)
		}
		fmt.Fprintf(out, "ack %d\n", n)
		out.Flush()
	}
}

// TestCrashRecovery kills a writing child process with SIGKILL at random
// moments and checks after each kill that every acknowledged batch is
// fully present and no batch is partly visible.
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
		// Every acknowledged batch is complete.
		for n := next; n <= acked; n++ {
			for i := range crashBatchKeys {
				v, err := db.Get(crashKey(n, i))
				if err != nil || !strings.HasPrefix(string(v), fmt.Sprintf("batch%d-", n)) {
					t.Fatalf("round %d: acknowledged batch %d key %d lost: %q, %v", round, n, i, v, err)
				}
				checked++
			}
		}
		// A batch after the last acknowledgement is all there or not at all.
		survivor := acked
		for n := acked + 1; ; n++ {
			present := 0
			for i := range crashBatchKeys {
				if _, err := db.Get(crashKey(n, i)); err == nil {
					present++
				}
			}
			if present != 0 && present != crashBatchKeys {
				t.Fatalf("round %d: batch %d partly visible (%d of %d keys)", round, n, present, crashBatchKeys)
			}
			if present == 0 {
				break
			}
			survivor = n
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		next = survivor + 1
		rounds++
	}
	t.Logf("%d crash rounds, %d acknowledged keys checked, %d batches written", rounds, checked, next)
	if rounds < 2 || next == 0 {
		t.Fatalf("crash test ran %d rounds and %d batches: not enough to mean anything", rounds, next)
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
