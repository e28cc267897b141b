//go:build race

package lsm

// raceEnabled reports a -race build, whose sync.Pool drops a share of what
// is put in it on purpose, so that tests of allocations do not hold.
const raceEnabled = true
