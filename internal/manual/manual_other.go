//go:build !linux

package manual

// mapAnon declines: the heap serves every allocation elsewhere.
func mapAnon(int) ([]byte, bool) { return nil, false }

func unmapAnon([]byte) {}
