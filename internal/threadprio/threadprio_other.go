//go:build !linux

package threadprio

// Lower does nothing here: only Linux gives each thread its own priority.
func Lower(steps int) (bool, error) { return false, nil }
