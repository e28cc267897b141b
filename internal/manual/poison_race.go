//go:build race

package manual

// poisonFreed fills a Slab's freed buffers with poisonByte, so that a test
// run with the race detector reads garbage, not plausible stale data,
// through a reference that outlived its buffer.
const poisonFreed = true

const poisonByte = 0xdb
