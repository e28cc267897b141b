// Package rusage reads what the process has used so far (getrusage(2)):
// the benchmarks report CPU time and context switches per operation from
// the difference of two readings.
package rusage

import (
	"syscall"
	"time"
)

// Usage is the process's use so far, all its threads together.
type Usage struct {
	CPU      time.Duration // user and system time
	Switches int64         // context switches, voluntary and not
}

// Self returns the process's use so far.
func Self() (Usage, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return Usage{}, err
	}
	return Usage{
		CPU:      time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		Switches: int64(ru.Nvcsw) + int64(ru.Nivcsw), // int32 fields on 32-bit Linux
	}, nil
}

// CPU returns the process's CPU time so far, 0 if it cannot be read.
func CPU() time.Duration {
	u, _ := Self()
	return u.CPU
}
