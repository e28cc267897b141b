//go:build !race

package manual

const poisonFreed = false

const poisonByte = 0xdb
