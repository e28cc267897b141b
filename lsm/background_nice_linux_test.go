package lsm

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// threadsAtNice counts the process's threads whose nice value is nice, and
// returns the nice value of the calling thread.
func threadsAtNice(t *testing.T, nice int) (count, own int) {
	t.Helper()
	stats, err := filepath.Glob("/proc/self/task/*/stat")
	if err != nil {
		t.Fatal(err)
	}
	self := strconv.Itoa(syscall.Gettid())
	own = -100
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // the thread ended since the glob
		}
		s := string(b)
		// Field 19 of the stat line; the command name (field 2) may hold
		// spaces and ends at the last ')'.
		n, err := strconv.Atoi(strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[16])
		if err != nil {
			t.Fatalf("%s: %q: %v", path, s, err)
		}
		if n == nice {
			count++
		}
		if filepath.Base(filepath.Dir(path)) == self {
			own = n
		}
	}
	return count, own
}

// waitThreadsAtNice polls until want threads run at nice, as background
// goroutines lower their threads' priority when they start.
func waitThreadsAtNice(t *testing.T, nice, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, _ := threadsAtNice(t, nice)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d threads at nice %d, want %d", n, nice, want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestBackgroundThreadsRunAtLowerPriority(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	base, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0)
	if err != nil {
		t.Fatal(err)
	}
	base = 20 - base // the raw system call answers 20 minus the nice value
	if base+3 > 19 {
		t.Skipf("the process already runs at nice %d: no room below it", base)
	}

	for _, steps := range []int{3, -1} {
		lowered := base + 3
		before, _ := threadsAtNice(t, lowered)
		db, err := Open(t.TempDir(), &Options{BackgroundNice: steps})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 1000 {
			if err := db.Set([]byte(strconv.Itoa(i)), []byte("v"), nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := db.Compact(nil, nil); err != nil {
			t.Fatal(err)
		}
		if steps > 0 {
			// The compaction and deletion goroutines, each on a thread
			// of its own; the flushes' keeps the process's priority.
			waitThreadsAtNice(t, lowered, before+2)
		} else if n, _ := threadsAtNice(t, lowered); n != before {
			t.Errorf("BackgroundNice %d: %d threads at nice %d, want %d", steps, n, lowered, before)
		}
		if _, own := threadsAtNice(t, lowered); own != base {
			t.Errorf("BackgroundNice %d: the writer's thread runs at nice %d, want %d", steps, own, base)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		// Their threads end with them: no other goroutine runs at their
		// priority.
		waitThreadsAtNice(t, lowered, before)
	}
}
