// Package rusage reads what the process has used so far (getrusage(2);
// GetProcessTimes on Windows): the benchmarks report CPU time and context
// switches per operation from the difference of two readings.
package rusage

import "time"

// Usage is the process's use so far, all its threads together.
type Usage struct {
	CPU      time.Duration // user and system time
	Switches int64         // context switches, voluntary and not
}

// CPU returns the process's CPU time so far, 0 if it cannot be read.
func CPU() time.Duration {
	u, _ := Self()
	return u.CPU
}
