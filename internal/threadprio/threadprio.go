// Package threadprio lowers the CPU priority of the thread a goroutine runs
// on, so that an engine's background work (flushes, compactions) yields the
// CPU to its writers when the two compete for it, as RocksDB's
// LowerThreadPoolCPUPriority does for its background pools.
//
// Only Linux gives each thread its own nice value; elsewhere Lower does
// nothing.
package threadprio

// MaxNice is the lowest priority a thread can have: the highest nice value.
const MaxNice = 19
