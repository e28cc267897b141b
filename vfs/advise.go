package vfs

// A file read at random offsets, such as an sstable serving point reads,
// gains nothing from the kernel's readahead: on a page-cache miss the
// kernel may read pages around the ones asked for, which costs disk
// bandwidth and, where the page cache is short, evicts pages that are
// wanted for pages that are not. An engine that reads such a file in
// order (a scan, a compaction) prefetches the range it will read next
// itself instead.

// A Prefetcher asks for a range of a file to be read into the page cache
// in the background, so that reads of it that follow do not wait on the
// disk. Prefetch is a hint: it returns nothing, and may do nothing.
type Prefetcher interface {
	Prefetch(off, n int64)
}

// AdviseRandomReads tells the kernel that f will be read at random
// offsets, so that a read missing the page cache reads only its own
// pages. It returns f, as a File that also implements Prefetcher where
// the platform can do both (an OS file on 64-bit x86 or ARM Linux, by
// posix_fadvise), else f unchanged.
func AdviseRandomReads(f File) File {
	return adviseRandomReads(f)
}
