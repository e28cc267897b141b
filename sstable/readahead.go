package sstable

// An iterator that reads a table's blocks from the file in order (a scan
// past the block cache, a compaction) asks for the range ahead to be read
// into the page cache before it gets there, keeping up to readaheadMax
// bytes asked for ahead of it (readaheadMin at first, doubling while the
// reads stay in order), and never past the data blocks (the index and
// filter are in memory). The table's file is opened for random reads
// (vfs.AdviseRandomReads: point reads then read only their own pages), so
// without this the kernel would read each block of a scan only when asked
// for it.
//
// The first window is small, as RocksDB's (8 KiB): a short scan, the
// common one, reads only a few blocks past the point where a readahead
// starts, and where the data is on the disk a scan costs about what it
// reads. Of a 100-entry scan over 5 million keys in a 256 MiB memory
// cgroup, a 64 KiB first window read 62 KiB per scan, most of it never
// used, and this one 27 KiB, at 1.4 times the scans per second (first
// windows of 4 to 64 KiB measured, starting after two blocks or three).
// A long scan reaches the largest window at its sixth prefetch.

const (
	// readaheadAfter is how many blocks read in order start a readahead:
	// a point read, or a short iterator, reads one or two.
	readaheadAfter = 3
	readaheadMin   = 8 << 10
	readaheadMax   = 256 << 10
	// readaheadSkip is how far past what was asked for a read may land
	// and still count as in order: a scan skips the blocks it finds in
	// the block cache.
	readaheadSkip = 64 << 10
	// prefetchMax bounds one prefetch: Linux reads at most the larger of
	// the device's largest request and its readahead setting per
	// WILLNEED, and drops the rest; both are commonly 128 KiB.
	prefetchMax = 128 << 10
)

// prefetcher is a ReadableFile that can read a range ahead into the page
// cache (vfs.Prefetcher).
type prefetcher interface {
	Prefetch(off, n int64)
}

// readahead is an iterator's record of its reads from the file.
type readahead struct {
	next  uint64 // where the block after the last one read starts
	limit uint64 // the file is asked for up to here
	ahead uint64 // how far past next the last request reached
	run   int    // blocks read from the file in order
}

// read records that the block at h was read from the file, and asks p
// for the range ahead, up to dataEnd at most, once a run of reads in
// order comes within half its lookahead of what was asked for. A read
// is in order if it is ahead of the last, by no more than readaheadSkip
// past what was asked for; any other (a seek back, or far ahead) ends the
// run.
func (ra *readahead) read(p prefetcher, h blockHandle, dataEnd uint64) {
	if h.offset < ra.next || h.offset > max(ra.next, ra.limit)+readaheadSkip {
		*ra = readahead{}
	}
	ra.run++
	ra.next = h.offset + h.length + blockTrailerLen
	if ra.run < readaheadAfter || ra.next+ra.ahead/2 < ra.limit {
		return
	}
	ra.ahead = min(max(2*ra.ahead, readaheadMin), readaheadMax)
	from := max(ra.next, ra.limit)
	ra.limit = min(ra.next+ra.ahead, dataEnd)
	for off := from; off < ra.limit; off += prefetchMax {
		p.Prefetch(int64(off), int64(min(prefetchMax, ra.limit-off)))
	}
}
