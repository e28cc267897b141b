// Package shrink gives back the memory of maps that grew large and then
// emptied: Go's maps do not shrink, so a node that held many entries at
// once (at a start) would keep their table for good after it let them go.
package shrink

import "maps"

// From is the size past which a map that fell to a quarter of its peak
// is made again at its new size; below it, the table is not worth a copy.
const From = 1024

// Map returns m, or a copy of it made at its size if it fell to a
// quarter of its peak, which it keeps in *peak (the caller's, one per
// map). Call it after deletions; *peak also counts the size it sees.
func Map[K comparable, V any](m map[K]V, peak *int) map[K]V {
	*peak = max(*peak, len(m))
	if *peak <= From || len(m) >= *peak/4 {
		return m
	}
	*peak = len(m)
	out := make(map[K]V, len(m)) // maps.Clone keeps m's table size
	maps.Copy(out, m)
	return out
}
