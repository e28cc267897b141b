package rusage

import (
	"syscall"
	"time"
)

// Self returns the process's use so far. Windows does not count a
// process's context switches: Switches is 0.
func Self() (Usage, error) {
	h, err := syscall.GetCurrentProcess()
	if err != nil {
		return Usage{}, err
	}
	var created, exited, kernel, user syscall.Filetime
	if err := syscall.GetProcessTimes(h, &created, &exited, &kernel, &user); err != nil {
		return Usage{}, err
	}
	// A FILETIME counts 100 ns ticks.
	ticks := func(t syscall.Filetime) time.Duration {
		return time.Duration(int64(t.HighDateTime)<<32|int64(t.LowDateTime)) * 100
	}
	return Usage{CPU: ticks(kernel) + ticks(user)}, nil
}
