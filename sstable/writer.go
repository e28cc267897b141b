package sstable

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cespare/xxhash/v2"
	"github.com/tabuladb/tabula/internal/base"
)

// writeBufferSize is the Writer's output buffer: large enough that writing
// a table costs few system calls even with small blocks.
const writeBufferSize = 256 << 10

// Metadata describes a table a Writer finished, for the manifest.
type Metadata struct {
	// Size is the file's size in bytes.
	Size uint64
	// Smallest and Largest are the first and last internal keys (copies).
	Smallest, Largest       base.InternalKey
	SmallestSeq, LargestSeq base.SeqNum
	NumEntries              uint64
	NumDeletions            uint64
}

// Writer writes a table: entries added in strictly increasing
// InternalCompare order go into data blocks; Close appends the filter,
// index and properties blocks and the footer. A Writer is used by one
// goroutine.
type Writer struct {
	w       *bufio.Writer
	scratch *Scratch // lends w and the builders their buffers
	opts    WriterOptions

	offset   uint64 // bytes handed to w so far
	rawData  uint64 // uncompressed size of the data blocks written
	block    blockBuilder
	index    blockBuilder
	filter   *filterBuilder // nil without filter
	comp     compressor
	checksum *xxhash.Digest

	// lastKey is the encoded last key added; keyBuf the one being added.
	lastKey, keyBuf []byte
	lastPrefix      []byte
	// pending is the handle of the last flushed data block, whose index
	// entry waits for the next key so that its separator can be short.
	pending    blockHandle
	hasPending bool

	props  Properties
	meta   Metadata
	err    error
	closed bool
}

// NewWriter returns a Writer that writes a table to w. It buffers its
// output; the caller syncs and closes the file after Close.
func NewWriter(w io.Writer, opts WriterOptions) *Writer {
	opts = opts.withDefaults()
	sc := opts.Scratch
	if sc == nil {
		sc = &Scratch{}
	}
	if sc.out == nil {
		sc.out = bufio.NewWriterSize(w, writeBufferSize)
	} else {
		sc.out.Reset(w)
	}
	wr := &Writer{
		w:        sc.out,
		scratch:  sc,
		opts:     opts,
		checksum: xxhash.New(),
	}
	wr.block = blockBuilder{restartInterval: opts.RestartInterval, buf: sc.block[:0]}
	wr.index = blockBuilder{restartInterval: defaultRestartInterval, buf: sc.index[:0], restarts: sc.indexRestarts[:0]}
	wr.comp.buf = sc.compressed
	if opts.BloomBitsPerKey > 0 {
		wr.filter = &filterBuilder{bitsPerKey: opts.BloomBitsPerKey, hashes: sc.hashes[:0]}
	}
	wr.props.Compression = opts.Compression
	return wr
}

// keepScratch leaves the memory the Writer grew in its Scratch, for the
// next Writer.
func (w *Writer) keepScratch() {
	sc := w.scratch
	sc.block, sc.index, sc.indexRestarts = w.block.buf[:0], w.index.buf[:0], w.index.restarts[:0]
	sc.compressed = w.comp.buf[:0]
	if w.filter != nil {
		sc.hashes = w.filter.hashes[:0]
	}
}

// errWriterClosed is returned by Add and Close after Close.
var errWriterClosed = errors.New("sstable: writer is closed")

// Add appends an entry. Keys must strictly increase by InternalCompare. An
// error is sticky: the table is then unusable and every later call fails.
func (w *Writer) Add(key base.InternalKey, value []byte) error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return errWriterClosed
	}
	if entrySize(key.Size(), len(value)) > maxBlockLen/2 {
		w.err = fmt.Errorf("sstable: entry %s of %d bytes is too large", key, key.Size()+len(value))
		return w.err
	}
	first := w.props.NumEntries == 0
	var last base.InternalKey
	if !first {
		last, _ = base.DecodeInternalKey(w.lastKey)
		if base.InternalCompare(last, key) >= 0 {
			w.err = fmt.Errorf("sstable: keys out of order: %s added after %s", key, last)
			return w.err
		}
	}
	if w.hasPending {
		w.addIndexEntry(appendSeparator(w.keyBuf[:0], last, key))
	}
	if w.filter != nil {
		if first || !bytes.Equal(last.UserKey, key.UserKey) {
			w.filter.add(keyHash(key.UserKey))
		}
		if w.opts.Split != nil {
			n := min(max(w.opts.Split(key.UserKey), 0), len(key.UserKey))
			prefix := key.UserKey[:n]
			if first || !bytes.Equal(prefix, w.lastPrefix) {
				w.filter.add(prefixHash(prefix))
				w.lastPrefix = append(w.lastPrefix[:0], prefix...)
			}
		}
	}

	w.keyBuf = key.AppendEncoded(w.keyBuf[:0])
	w.block.add(w.keyBuf, value)
	w.lastKey, w.keyBuf = w.keyBuf, w.lastKey

	p := &w.props
	if first {
		p.Smallest = key.Clone()
		p.SmallestSeq, p.LargestSeq = key.SeqNum(), key.SeqNum()
	}
	p.NumEntries++
	if key.Kind() == base.KindDelete {
		p.NumDeletions++
	}
	p.RawKeySize += uint64(key.Size())
	p.RawValueSize += uint64(len(value))
	p.SmallestSeq = min(p.SmallestSeq, key.SeqNum())
	p.LargestSeq = max(p.LargestSeq, key.SeqNum())

	if w.block.estimatedSize() >= w.opts.BlockSize {
		return w.flushBlock()
	}
	return nil
}

// appendSeparator appends to dst the encoding of a key k with
// a <= k < b, as short as it can find: when the user keys differ at byte n,
// a[:i+1] with a[i] incremented for the first i >= n where that stays below
// b, followed by the largest trailer; otherwise a itself.
func appendSeparator(dst []byte, a, b base.InternalKey) []byte {
	n := 0
	for n < len(a.UserKey) && n < len(b.UserKey) && a.UserKey[n] == b.UserKey[n] {
		n++
	}
	if n < len(a.UserKey) && n < len(b.UserKey) {
		for i := n; i < len(a.UserKey)-1; i++ {
			// Incrementing a[i] keeps the key above a; below b it stays
			// if i > n (a[n] < b[n] decides) or a[n]+1 < b[n].
			if a.UserKey[i] < 0xff && (i > n || a.UserKey[i]+1 < b.UserKey[n]) {
				dst = append(dst, a.UserKey[:i+1]...)
				dst[len(dst)-1]++
				return binary.LittleEndian.AppendUint64(dst, uint64(^base.Trailer(0)))
			}
		}
	}
	return a.AppendEncoded(dst)
}

func (w *Writer) addIndexEntry(sep []byte) {
	var hb [2 * binary.MaxVarintLen64]byte
	w.index.add(sep, appendBlockHandle(hb[:0], w.pending))
	w.hasPending = false
}

// flushBlock writes the current data block.
func (w *Writer) flushBlock() error {
	block := w.block.finish()
	w.props.MaxBlockSize = max(w.props.MaxBlockSize, uint64(len(block)))
	w.rawData += uint64(len(block))
	h, err := w.writeBlock(block, w.opts.Compression.blockType())
	if err != nil {
		return err
	}
	w.block.reset()
	w.props.DataSize += h.length + blockTrailerLen
	w.props.NumDataBlocks++
	w.pending, w.hasPending = h, true
	return nil
}

// writeBlock writes a block and its trailer, compressed with typ if that
// saves at least an eighth of its size.
func (w *Writer) writeBlock(block []byte, typ byte) (blockHandle, error) {
	if len(block) > maxBlockLen {
		w.err = fmt.Errorf("sstable: block of %d bytes at offset %d exceeds the %d-byte limit", len(block), w.offset, maxBlockLen)
		return blockHandle{}, w.err
	}
	stored := block
	if typ != blockTypeNone {
		c, err := w.comp.compress(typ, block)
		if err != nil {
			w.err = fmt.Errorf("sstable: compress block at offset %d: %w", w.offset, err)
			return blockHandle{}, w.err
		}
		if len(c) <= len(block)-len(block)/8 {
			stored = c
		} else {
			typ = blockTypeNone
		}
	}
	var trailer [blockTrailerLen]byte
	trailer[0] = typ
	w.checksum.Reset()
	w.checksum.Write(stored)
	w.checksum.Write(trailer[:1])
	binary.LittleEndian.PutUint64(trailer[1:], w.checksum.Sum64())
	h := blockHandle{offset: w.offset, length: uint64(len(stored))}
	if _, err := w.w.Write(stored); err != nil {
		w.err = fmt.Errorf("sstable: write block at offset %d: %w", w.offset, err)
		return blockHandle{}, w.err
	}
	if _, err := w.w.Write(trailer[:]); err != nil {
		w.err = fmt.Errorf("sstable: write block at offset %d: %w", w.offset, err)
		return blockHandle{}, w.err
	}
	w.offset += uint64(len(stored)) + blockTrailerLen
	return h, nil
}

// EstimatedSize returns about how many bytes the file would have if it
// were closed now.
func (w *Writer) EstimatedSize() uint64 {
	// The block being built will compress about as well as the ones
	// before it.
	block := uint64(w.block.estimatedSize())
	if w.rawData > 0 {
		block = block * w.props.DataSize / w.rawData
	}
	n := w.offset + block + uint64(w.index.estimatedSize()) +
		blockTrailerLen + 512 /* properties */ + footerLen
	if w.filter != nil {
		n += uint64(w.filter.estimatedSize())
	}
	return n
}

// Close finishes the table: it flushes the last data block, writes the
// filter, index and properties blocks and the footer, and flushes the
// buffer. It does not sync or close the underlying writer.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return errWriterClosed
	}
	w.closed = true
	defer w.comp.close()
	defer w.keepScratch()
	if !w.block.empty() {
		if err := w.flushBlock(); err != nil {
			return err
		}
	}
	if w.hasPending {
		// The last block's separator is its last key: nothing follows
		// that would let it be shorter.
		w.addIndexEntry(w.lastKey)
	}

	var ft footer
	ft.version = FormatVersion
	if w.filter != nil && len(w.filter.hashes) > 0 {
		h, err := w.writeBlock(w.filter.finish(), blockTypeNone)
		if err != nil {
			return err
		}
		ft.filter = h
		w.props.FilterSize = h.length + blockTrailerLen
		w.props.FilterKeys = uint64(len(w.filter.hashes))
		w.props.BloomBitsPerKey = w.filter.bitsPerKey
		w.props.PrefixFilter = w.opts.Split != nil
	}

	indexBlock := w.index.finish()
	w.props.MaxBlockSize = max(w.props.MaxBlockSize, uint64(len(indexBlock)))
	h, err := w.writeBlock(indexBlock, w.opts.Compression.blockType())
	if err != nil {
		return err
	}
	ft.index = h
	w.props.IndexSize = h.length + blockTrailerLen

	if w.props.NumEntries > 0 {
		last, _ := base.DecodeInternalKey(w.lastKey)
		w.props.Largest = last.Clone()
	}
	if ft.properties, err = w.writeBlock(w.props.encode(), blockTypeNone); err != nil {
		return err
	}

	if _, err := w.w.Write(ft.encode()); err != nil {
		w.err = fmt.Errorf("sstable: write footer: %w", err)
		return w.err
	}
	w.offset += footerLen
	if err := w.w.Flush(); err != nil {
		w.err = fmt.Errorf("sstable: flush: %w", err)
		return w.err
	}
	p := &w.props
	w.meta = Metadata{
		Size:         w.offset,
		Smallest:     p.Smallest,
		Largest:      p.Largest,
		SmallestSeq:  p.SmallestSeq,
		LargestSeq:   p.LargestSeq,
		NumEntries:   p.NumEntries,
		NumDeletions: p.NumDeletions,
	}
	return nil
}

// Metadata describes the table; valid after Close returned nil.
func (w *Writer) Metadata() Metadata { return w.meta }

// Properties returns the table's properties; valid after Close returned
// nil.
func (w *Writer) Properties() Properties { return w.props }
