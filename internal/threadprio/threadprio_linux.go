package threadprio

import (
	"fmt"
	"runtime"
	"syscall"
)

// Lower locks the calling goroutine to its OS thread and raises that
// thread's nice value by steps above the process's (capped at MaxNice).
// It reports whether it did: steps <= 0 does nothing, and if the kernel
// refuses, the goroutine is unlocked again and the error returned.
//
// A goroutine that Lower locked must never unlock its thread: raising a
// thread's priority back takes a privilege the process may not have, so
// the thread has to end with the goroutine (as Go ends a thread whose
// goroutine exits locked to it) rather than go back to run other
// goroutines, such as the writers, at the lower priority.
func Lower(steps int) (bool, error) {
	if steps <= 0 {
		return false, nil
	}
	runtime.LockOSThread()
	// The thread's nice value is the process's: a thread Lower locked is
	// never handed to other goroutines, and Go does not clone new threads
	// from a locked one. The raw system call answers 20 minus the nice
	// value, so that its answer is never negative.
	prio, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0)
	if err == nil {
		nice := min(20-prio+steps, MaxNice)
		// On Linux a thread ID names that one thread, not its process.
		err = syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), nice)
	}
	if err != nil {
		runtime.UnlockOSThread()
		return false, fmt.Errorf("threadprio: lower the thread's priority: %w", err)
	}
	return true, nil
}
