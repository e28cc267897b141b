package lsm

import (
	"bytes"
	"sort"
)

// sortedKeys returns want's keys within [lower, upper) in order.
func sortedKeys(want map[string]string, lower, upper []byte) []string {
	var keys []string
	for k := range want {
		if lower != nil && bytes.Compare([]byte(k), lower) < 0 {
			continue
		}
		if upper != nil && bytes.Compare([]byte(k), upper) >= 0 {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
