package sstable

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/tabuladb/tabula/internal/base"
	"github.com/tabuladb/tabula/internal/manual"
)

// ReadableFile is what a Reader reads a table from. ReadAt must be safe for
// concurrent use, as it is for *os.File and vfs.File.
type ReadableFile interface {
	io.ReaderAt
	io.Closer
}

// Reader reads one table. NewReader verifies and loads the footer, the
// properties, the index and the filter; data blocks are read (and verified)
// on demand, through the block cache when there is one.
//
// A Reader is safe for concurrent use by any number of goroutines: its
// in-memory state is immutable after NewReader, blocks are never modified
// once read, and the block cache has its own locks.
type Reader struct {
	f       ReadableFile
	fileNum uint64
	// prefetch is f when it can prefetch (readahead.go), else nil;
	// dataEnd is where the data blocks end, which no prefetch passes.
	prefetch prefetcher
	dataEnd  uint64
	cache    *Cache
	index    index
	filter   *bloomFilter // nil when the table has none
	props    Properties
	// zstd decodes zstd blocks when there is no Cache to share one.
	zstd zstdDecoder
	// iters recycles iterators: a scan then allocates nothing.
	iters sync.Pool
	// cleanup frees the index and filter of a Reader never closed.
	cleanup runtime.Cleanup
	closed  atomic.Bool
}

// NewReader opens the table in f, whose size is size. It reads and checks
// the footer, properties, index and filter blocks; an error wraps
// base.ErrCorruption when they are damaged. On error f is not closed.
func NewReader(f ReadableFile, size int64, opts ReaderOptions) (*Reader, error) {
	r := &Reader{f: f, fileNum: opts.FileNum, cache: opts.Cache}
	r.iters.New = func() any { return new(iterator) }
	if size < footerLen {
		return nil, r.errorf("file of %d bytes is too small to be a table: %w", size, base.ErrCorruption)
	}
	buf := make([]byte, footerLen)
	if err := readFull(f, buf, size-footerLen); err != nil {
		return nil, r.errorf("read footer: %w", err)
	}
	ft, err := decodeFooter(buf, uint64(size))
	if err != nil {
		return nil, r.errorf("%w", err)
	}

	// The properties block is stored uncompressed: it says how large a
	// decompressed block may be.
	data, err := r.readBlock(ft.properties, 0)
	if err != nil {
		return nil, r.wrapMeta("properties", ft.properties, err)
	}
	if r.props, err = decodeProperties(data); err != nil {
		return nil, r.wrapMeta("properties", ft.properties, err)
	}

	// Data blocks precede every meta block.
	dataEnd := min(ft.index.offset, ft.properties.offset)
	if ft.filter.length > 0 {
		dataEnd = min(dataEnd, ft.filter.offset)
	}
	r.prefetch, _ = f.(prefetcher)
	r.dataEnd = dataEnd
	if data, err = r.readBlock(ft.index, r.props.MaxBlockSize); err != nil {
		return nil, r.wrapMeta("index", ft.index, err)
	}
	if r.index, err = decodeIndex(data, dataEnd); err != nil {
		return nil, r.wrapMeta("index", ft.index, err)
	}
	if err := r.readFilter(ft); err != nil {
		r.index.free()
		return nil, err
	}
	// The index and filter live outside the Go heap until Close; should a
	// Reader be dropped unclosed, the collector still returns them.
	r.cleanup = runtime.AddCleanup(r, freeMeta, meta{r.index.mem, r.filterMem()})
	return r, nil
}

// readFilter checks the index against the properties and reads the
// filter block.
func (r *Reader) readFilter(ft footer) error {
	if uint64(r.index.len()) != r.props.NumDataBlocks {
		return r.errorf("index has %d blocks, properties say %d: %w",
			r.index.len(), r.props.NumDataBlocks, base.ErrCorruption)
	}
	if ft.filter.length > 0 {
		data, err := r.readBlock(ft.filter, 0)
		if err != nil {
			return r.wrapMeta("filter", ft.filter, err)
		}
		if r.filter, err = decodeFilter(data); err != nil {
			return r.wrapMeta("filter", ft.filter, err)
		}
	} else if r.props.PrefixFilter {
		return r.errorf("properties promise a prefix filter but there is no filter block: %w", base.ErrCorruption)
	}
	return nil
}

// meta is the memory of a Reader's index and filter, for its cleanup.
type meta struct{ index, filter manual.Buf }

func freeMeta(m meta) {
	m.index.Free()
	m.filter.Free()
}

func (r *Reader) filterMem() manual.Buf {
	if r.filter == nil {
		return manual.Buf{}
	}
	return r.filter.mem
}

// live panics if the Reader is closed: its index and filter memory is
// gone, and a lookup would find nothing where the table has keys.
func (r *Reader) live() {
	if r.closed.Load() {
		panic(fmt.Sprintf("sstable %06d: use of a closed Reader", r.fileNum))
	}
}

func (r *Reader) errorf(format string, args ...any) error {
	return fmt.Errorf("sstable %06d: "+format, append([]any{r.fileNum}, args...)...)
}

// blockErr wraps an error met in the block at h.
func (r *Reader) blockErr(h blockHandle, err error) error {
	return fmt.Errorf("sstable %06d: block at offset %d: %w", r.fileNum, h.offset, err)
}

func (r *Reader) wrapMeta(name string, h blockHandle, err error) error {
	return fmt.Errorf("sstable %06d: %s block at offset %d: %w", r.fileNum, name, h.offset, unwrapBlockErr(err))
}

// unwrapBlockErr strips the context readBlock added, so meta block errors
// name the block once.
func unwrapBlockErr(err error) error {
	var be *blockError
	if errors.As(err, &be) {
		return be.err
	}
	return err
}

// blockError is what readBlock returns: the cause, with the file and block
// in its message.
type blockError struct {
	fileNum uint64
	offset  uint64
	err     error
}

func (e *blockError) Error() string {
	return fmt.Sprintf("sstable %06d: block at offset %d: %v", e.fileNum, e.offset, e.err)
}

func (e *blockError) Unwrap() error { return e.err }

func readFull(f io.ReaderAt, buf []byte, off int64) error {
	n, err := f.ReadAt(buf, off)
	if n == len(buf) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = fmt.Errorf("short read (%d of %d bytes), file truncated: %w", n, len(buf), base.ErrCorruption)
	}
	return err
}

// readBlock reads the block at h, verifies its checksum and decompresses
// it, refusing a decompressed size above maxDecoded (0: the block must be
// stored uncompressed). The result is on the heap.
func (r *Reader) readBlock(h blockHandle, maxDecoded uint64) ([]byte, error) {
	return r.readBlockInto(h, maxDecoded, &blockScratch{})
}

// blockScratch is memory a reader of blocks that it uses one at a time
// (an iterator that does not fill the cache: a compaction's) reads each
// next block into, so that its reads make no garbage.
type blockScratch struct {
	raw, data []byte
}

// grow returns b resized to n bytes, reallocated only if too small.
func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// readBlockInto is readBlock into scratch's memory: the block is valid
// until scratch is used again.
func (r *Reader) readBlockInto(h blockHandle, maxDecoded uint64, scratch *blockScratch) ([]byte, error) {
	scratch.raw = grow(scratch.raw, int(h.length+blockTrailerLen))
	typ, src, n, err := r.readStored(h, maxDecoded, scratch.raw)
	if err != nil || typ == blockTypeNone {
		return src, err
	}
	scratch.data = grow(scratch.data, n)
	return scratch.data, r.decompress(h, typ, src, scratch.data)
}

// readStored reads the block at h with its trailer into buf, of h.length
// + blockTrailerLen bytes, and verifies its checksum. It returns the
// block's type, its stored bytes (in buf) and its decoded size, refused
// above maxDecoded (0: the block must be stored uncompressed).
func (r *Reader) readStored(h blockHandle, maxDecoded uint64, buf []byte) (typ byte, src []byte, n int, err error) {
	if err := readFull(r.f, buf, int64(h.offset)); err != nil {
		return 0, nil, 0, &blockError{r.fileNum, h.offset, err}
	}
	src = buf[:h.length:h.length]
	if got, want := xxhash.Sum64(buf[:h.length+1]), binary.LittleEndian.Uint64(buf[h.length+1:]); got != want {
		return 0, nil, 0, &blockError{r.fileNum, h.offset, fmt.Errorf("checksum mismatch (computed %#x, stored %#x): %w", got, want, base.ErrCorruption)}
	}
	typ = buf[h.length]
	if typ == blockTypeNone {
		return typ, src, len(src), nil
	}
	if maxDecoded == 0 {
		return 0, nil, 0, &blockError{r.fileNum, h.offset, fmt.Errorf("block type %d where only uncompressed blocks are allowed: %w", typ, base.ErrCorruption)}
	}
	if n, err = decodedLen(typ, src, maxDecoded); err != nil {
		return 0, nil, 0, &blockError{r.fileNum, h.offset, err}
	}
	return typ, src, n, nil
}

func (r *Reader) decompress(h blockHandle, typ byte, src, dst []byte) error {
	zd := &r.zstd
	if r.cache != nil {
		zd = &r.cache.zstd
	}
	if err := decompress(typ, src, dst, zd); err != nil {
		return &blockError{r.fileNum, h.offset, err}
	}
	return nil
}

// readCached reads the block at h into the cache's memory and caches it.
// The entry comes with a reference for the caller.
func (r *Reader) readCached(h blockHandle) (*cacheEntry, error) {
	raw := r.cache.raw.Get().(*[]byte)
	defer r.cache.raw.Put(raw)
	*raw = grow(*raw, int(h.length+blockTrailerLen))
	typ, src, n, err := r.readStored(h, r.props.MaxBlockSize, *raw)
	if err != nil {
		return nil, err
	}
	mem := r.cache.alloc(n)
	data := mem.Bytes()[:n:n]
	if typ == blockTypeNone {
		copy(data, src)
	} else if err := r.decompress(h, typ, src, data); err != nil {
		r.cache.slab.Free(mem)
		return nil, err
	}
	return r.cache.set(r.fileNum, h.offset, mem, data), nil
}

// block is a data block, and the cache entry it lives in: nil for one
// read onto the heap, which the collector frees.
type block struct {
	data []byte
	e    *cacheEntry
}

func (b block) release() {
	if b.e != nil {
		b.e.release()
	}
}

// dataBlock returns data block h from the cache or the file, adding a
// block read from the file to the cache if fill. The caller releases it.
// A block not cached is read into scratch when it is not nil (valid until
// scratch is used again), else onto the heap. A block read from the file
// is recorded in ra, when not nil.
func (r *Reader) dataBlock(h blockHandle, fill bool, scratch *blockScratch, ra *readahead) (block, error) {
	if r.cache != nil {
		if e := r.cache.get(r.fileNum, h.offset); e != nil {
			return block{e.data, e}, nil
		}
	}
	if ra != nil && r.prefetch != nil {
		ra.read(r.prefetch, h, r.dataEnd)
	}
	if r.cache != nil && fill {
		e, err := r.readCached(h)
		if err != nil {
			return block{}, err
		}
		return block{e.data, e}, nil
	}
	if scratch == nil {
		scratch = &blockScratch{}
	}
	b, err := r.readBlockInto(h, r.props.MaxBlockSize, scratch)
	return block{data: b}, err
}

// Value is a value Get found, and the block it lies in, which stays in
// memory (in the block cache, or out of it once evicted) until Release.
// Bytes must not be modified, nor used after Release.
type Value struct {
	Bytes []byte
	Kind  base.Kind
	block *cacheEntry
}

// Release lets the value's block go. A Value made elsewhere, with no
// block, releases nothing.
func (v Value) Release() {
	if v.block != nil {
		v.block.release()
	}
}

// Get returns the newest version of userKey with a sequence number <= seq
// in this table, found=false if the table holds no such version. The
// bloom filter is consulted first, so a missing key usually costs no I/O.
// A found value must be released.
func (r *Reader) Get(userKey []byte, seq base.SeqNum) (v Value, found bool, err error) {
	r.live()
	if r.filter != nil && !r.filter.mayContain(keyHash(userKey)) {
		return Value{}, false, nil
	}
	search := base.MakeSearchKey(userKey, min(seq, base.SeqNumMax))
	i := r.index.seek(search)
	if i == r.index.len() {
		return Value{}, false, nil
	}
	h := r.index.handle(i)
	b, err := r.dataBlock(h, true, nil, nil)
	if err != nil {
		return Value{}, false, err
	}
	// The block holds the first key >= search if the table has one: its
	// separator is >= search, and the separator is either its last key
	// or a key between its last key and the next block's first that no
	// version of userKey can equal.
	value, trailer, match, err := getInBlock(b.data, search)
	if err != nil || !match {
		b.release()
		if err != nil {
			err = r.blockErr(h, err)
		}
		return Value{}, false, err
	}
	return Value{Bytes: value, Kind: trailer.Kind(), block: b.e}, true, nil
}

// MayContain reports whether the table may hold some version of userKey;
// false is certain, true is not.
func (r *Reader) MayContain(userKey []byte) bool {
	r.live()
	return r.filter == nil || r.filter.mayContain(keyHash(userKey))
}

// MayContainPrefix reports whether the table may hold a key whose Split
// prefix (as configured when it was written) is prefix; false is certain.
// It is true when the table has no prefix filter.
func (r *Reader) MayContainPrefix(prefix []byte) bool {
	r.live()
	return r.filter == nil || !r.props.PrefixFilter || r.filter.mayContain(prefixHash(prefix))
}

// NewIter returns an iterator over the table's entries whose user keys are
// in [lower, upper); a nil bound is open. The iterator reads no data block
// that the index proves to be wholly outside the bounds. It must be closed,
// and not used after Close.
func (r *Reader) NewIter(lower, upper []byte) base.InternalIterator {
	r.live()
	it := r.iters.Get().(*iterator)
	it.init(r, lower, upper, true)
	return it
}

// NewCompactionIter returns an iterator over all the table's entries that
// takes data blocks from the block cache but adds none it reads: a
// compaction reads each block once, and caching them would evict the
// blocks reads come back to, and hold memory for nothing (LevelDB's and
// RocksDB's compactions read with fill_cache off for the same reasons).
func (r *Reader) NewCompactionIter() base.InternalIterator {
	r.live()
	it := r.iters.Get().(*iterator)
	it.init(r, nil, nil, false)
	return it
}

// Properties returns the table's properties. Their keys must not be
// modified.
func (r *Reader) Properties() Properties { return r.props }

// Close closes the file and returns the index's and filter's memory. No
// Get or iterator may be in progress, and none may start after it (it
// panics); values not yet released stay valid, since they hold their
// blocks.
func (r *Reader) Close() error {
	if r.closed.Swap(true) {
		return errors.New("sstable: Reader closed twice")
	}
	r.cleanup.Stop()
	r.index.free()
	if r.filter != nil {
		r.filter.free()
	}
	r.zstd.close()
	return r.f.Close()
}
