package threadprio

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// threadNice reads a thread's nice value from /proc: the 19th field of its
// stat line, counted after the command name (which may hold spaces).
func threadNice(t *testing.T, tid int) (int, bool) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/stat")
	if os.IsNotExist(err) {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	nice, err := strconv.Atoi(fields[16]) // field 19; fields here start at 3
	if err != nil {
		t.Fatalf("stat of thread %d: %q: %v", tid, s, err)
	}
	return nice, true
}

func TestLowerOnlyTheCallersThread(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self := syscall.Gettid()
	base, _ := threadNice(t, self)

	type lowered struct {
		tid int
		ok  bool
		err error
	}
	got := make(chan lowered)
	release := make(chan struct{})
	go func() {
		ok, err := Lower(5)
		got <- lowered{syscall.Gettid(), ok, err}
		<-release
	}()
	l := <-got
	if l.err != nil || !l.ok {
		t.Fatalf("Lower(5) = %v, %v", l.ok, l.err)
	}
	if nice, _ := threadNice(t, l.tid); nice != min(base+5, MaxNice) {
		t.Errorf("lowered thread's nice = %d, want %d", nice, min(base+5, MaxNice))
	}
	if nice, _ := threadNice(t, self); nice != base {
		t.Errorf("the caller's nice changed to %d from %d", nice, base)
	}

	// The thread must end with its goroutine, not run others at its
	// priority.
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, alive := threadNice(t, l.tid); !alive {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lowered thread outlived its goroutine")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestLowerCapsAndSkips(t *testing.T) {
	got := make(chan int)
	release := make(chan struct{})
	defer close(release)
	go func() {
		if ok, err := Lower(0); ok || err != nil {
			t.Errorf("Lower(0) = %v, %v; want nothing done", ok, err)
		}
		if ok, err := Lower(100); !ok || err != nil {
			t.Errorf("Lower(100) = %v, %v", ok, err)
		}
		got <- syscall.Gettid()
		<-release
	}()
	tid := <-got
	if nice, _ := threadNice(t, tid); nice != MaxNice {
		t.Errorf("nice after Lower(100) = %d, want %d", nice, MaxNice)
	}
}
