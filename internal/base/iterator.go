package base

// InternalIterator walks internal keys in InternalCompare order: user keys
// ascending, and for one user key its versions newest first. Memtables,
// sstables, levels and the merging iterator all implement it; the lsm
// package's user-facing Iterator sits on top and hides sequence numbers and
// deletions.
//
// Positioning methods return whether the iterator is now at an entry. After
// one returns false, Error says whether that was exhaustion (nil) or a
// failure. An iterator created with bounds never yields a user key outside
// [lower, upper).
//
// Key and Value return slices that stay valid only until the next
// positioning call; callers that keep them must copy. An iterator is used by
// one goroutine at a time.
type InternalIterator interface {
	// SeekGE moves to the first entry whose user key is >= key.
	SeekGE(key []byte) bool
	// SeekLT moves to the last entry whose user key is < key.
	SeekLT(key []byte) bool
	// First moves to the first entry.
	First() bool
	// Last moves to the last entry.
	Last() bool
	// Next moves forward one entry.
	Next() bool
	// Prev moves back one entry.
	Prev() bool
	// Key returns the current entry's key. Only valid after a positioning
	// call returned true.
	Key() InternalKey
	// Value returns the current entry's value.
	Value() []byte
	// Error returns the first error the iterator met, if any.
	Error() error
	// Close releases the iterator's resources and returns Error().
	Close() error
}
