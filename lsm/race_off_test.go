//go:build !race

package lsm

// raceEnabled reports a -race build (race_on_test.go).
const raceEnabled = false
