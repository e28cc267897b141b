//go:build unix

package rusage

import (
	"syscall"
	"time"
)

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
