package memtable

import (
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// hugePageSize is the size of a transparent huge page with 4 KiB base pages
// (x86-64, and arm64 as usually configured).
const hugePageSize = 2 << 20

// adviseHugePages asks the kernel to back the whole huge pages inside buf
// with transparent huge pages. A search through a large memtable is a chain
// of cache misses at random addresses, and with 4 KiB pages most of them are
// TLB misses as well, whose page walks are expensive, worse still under
// virtualization; with huge pages BenchmarkGet and BenchmarkAdd ran about 25%
// faster. It also replaces 512 page faults per 2 MiB of arena with one.
//
// It is advice only: where THP is disabled, or no huge page is free, the
// kernel uses small pages as before, so errors are ignored. Arenas under a
// few huge pages are left alone, as they gain little.
func adviseHugePages(buf []byte) {
	if len(buf) < 4*hugePageSize {
		return
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	start := (hugePageSize - addr%hugePageSize) % hugePageSize
	end := start + (uintptr(len(buf))-start)&^(hugePageSize-1)
	_ = syscall.Madvise(buf[start:end], syscall.MADV_HUGEPAGE)
}

// madvPopulateWrite is MADV_POPULATE_WRITE (Linux 5.14): fault pages in,
// writable, without changing what they hold.
const madvPopulateWrite = 23

// populateChunk is how much of an arena one populate call faults in: one
// huge page, so that release waits at most that long for the populator.
const populateChunk = hugePageSize

// populateLead is how far ahead of the allocation offset a populator keeps
// pages faulted in: enough that writers do not catch up with it, small
// enough that an arena costs about what its entries use. A smaller arena
// gets an eighth of its size (populatorLead): a DB's first memtables are
// small (lsm.Options.InitialMemTableSize) and often hold little, and a
// full lead on each of them was RSS that no entry used.
const populateLead = 2 * hugePageSize

// populatorLead is the lead of a populator over an arena of size bytes:
// whole pages of the system's size, as madvise takes them (64 KiB on
// some arm64 kernels), and at least one.
func populatorLead(size uint64) uint64 {
	page := uint64(os.Getpagesize())
	return max(min(populateLead, size/8)&^(page-1), page)
}

// startPopulating starts a populator on an arena mapping whose
// allocation offset is used.
func startPopulating(buf []byte, used *atomic.Uint64) *populator {
	p := &populator{
		used: used,
		lead: populatorLead(uint64(len(buf))),
		wake: make(chan struct{}, 1),
		quit: make(chan struct{}),
		done: make(chan struct{}),
	}
	go p.populate(buf)
	return p
}

// A populator faults an arena's pages in on its own goroutine, a little
// ahead of the writers. A first write to a page of a fresh mapping faults,
// and the kernel zeroes the page then, on the writer's time: for a huge
// page, with the compaction THP may need to find one, that took
// milliseconds, and made the p99 of batched writes. MADV_POPULATE_WRITE
// does that work in advance without changing a byte already written, so it
// may run over pages writers are filling.
type populator struct {
	used  *atomic.Uint64 // the arena's allocation offset
	lead  uint64         // populatorLead of the arena
	ahead atomic.Uint64  // the pages below it are populated
	wake  chan struct{}  // nudge's: the writers came near ahead
	quit  chan struct{}  // halt's
	done  chan struct{}  // closed when populate returns
}

func (p *populator) populate(buf []byte) {
	defer close(p.done)
	size := uint64(len(buf))
	for {
		target := min(p.used.Load()+p.lead, size)
		for off := p.ahead.Load(); off < target; off = p.ahead.Load() {
			end := min(off+min(populateChunk, p.lead), size)
			_, _, errno := syscall.Syscall(syscall.SYS_MADVISE, uintptr(unsafe.Pointer(&buf[off])), uintptr(end-off), madvPopulateWrite)
			if errno != 0 {
				return // an older kernel: writers fault the pages in
			}
			p.ahead.Store(end)
		}
		if target == size {
			return
		}
		select {
		case <-p.wake:
		case <-p.quit:
			return
		}
	}
}

// nudge wakes the populator once the allocations, now up to end, come
// within half its lead of the populated pages. Cheap enough for every
// allocation: a load, and a send once per half lead.
func (p *populator) nudge(end uint64) {
	if end+p.lead/2 > p.ahead.Load() {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// halt stops the populator and waits until it has.
func (p *populator) halt() {
	close(p.quit)
	<-p.done
}
