package sstable

// An iterator that reads a table's blocks from the file in order (a scan
// past the block cache, a compaction) asks for the range ahead to be read
// into the page cache before it gets there, in windows that grow from
// readaheadMin to readaheadMax while the reads stay in order. The table's
// file is opened for random reads (vfs.AdviseRandomReads: point reads
// then read only their own pages), so without this the kernel would read
// each block of a scan only when asked for it.

const (
	// readaheadAfter is how many blocks read in order start a readahead:
	// a point read, or a short iterator, reads one or two.
	readaheadAfter = 3
	readaheadMin   = 64 << 10
	readaheadMax   = 256 << 10
)

// prefetcher is a ReadableFile that can read a range ahead into the page
// cache (vfs.Prefetcher).
type prefetcher interface {
	Prefetch(off, n int64)
}

// readahead is an iterator's record of its reads from the file.
type readahead struct {
	next   uint64 // where the block after the last one read starts
	limit  uint64 // the file is asked for up to here
	window uint64 // the last window asked for
	run    int    // blocks read from the file in order
}

// read records that the block at h was read from the file, and asks f,
// if it can prefetch, for the next window once a run of reads in order
// comes within half a window of what was asked for. A read that does not
// follow the last (a seek back, or past what was asked for) ends the run.
func (ra *readahead) read(f ReadableFile, h blockHandle) {
	p, ok := f.(prefetcher)
	if !ok {
		return
	}
	if h.offset < ra.next || h.offset > max(ra.next, ra.limit) {
		*ra = readahead{}
	}
	ra.run++
	ra.next = h.offset + h.length + blockTrailerLen
	if ra.run < readaheadAfter || ra.next+ra.window/2 < ra.limit {
		return
	}
	ra.window = min(max(2*ra.window, readaheadMin), readaheadMax)
	from := max(ra.next, ra.limit)
	ra.limit = ra.next + ra.window
	if ra.limit > from {
		p.Prefetch(int64(from), int64(ra.limit-from))
	}
}
