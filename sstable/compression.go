package sstable

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/tabuladb/tabula/internal/base"
)

// compressor compresses the blocks of one Writer, reusing its output buffer
// and (for zstd) its encoder across blocks.
type compressor struct {
	buf []byte
	enc *zstd.Encoder
}

// compress returns the stored form of block under typ: for S2 the S2 block
// format (which starts with the uvarint decoded length), for zstd the
// uvarint decoded length followed by one zstd frame. The result aliases the
// compressor's buffer.
func (c *compressor) compress(typ byte, block []byte) ([]byte, error) {
	switch typ {
	case blockTypeS2:
		n := s2.MaxEncodedLen(len(block))
		if n < 0 {
			return nil, fmt.Errorf("block of %d bytes too large for s2", len(block))
		}
		if cap(c.buf) < n {
			c.buf = make([]byte, n)
		}
		return s2.Encode(c.buf[:n], block), nil
	case blockTypeZstd:
		if c.enc == nil {
			// One encoder per Writer: EncodeAll with concurrency 1 runs
			// on the caller's goroutine, and the CRC is redundant with
			// the block trailer's checksum.
			enc, err := zstd.NewWriter(nil,
				zstd.WithEncoderConcurrency(1),
				zstd.WithEncoderCRC(false),
				zstd.WithEncoderLevel(zstd.SpeedDefault))
			if err != nil {
				return nil, fmt.Errorf("create zstd encoder: %w", err)
			}
			c.enc = enc
		}
		c.buf = binary.AppendUvarint(c.buf[:0], uint64(len(block)))
		c.buf = c.enc.EncodeAll(block, c.buf)
		return c.buf, nil
	}
	return block, nil
}

func (c *compressor) close() {
	if c.enc != nil {
		c.enc.Close()
		c.enc = nil
	}
}

// zstdDecoder is a lazily created zstd decoder. DecodeAll is safe for
// concurrent use (the decoder keeps a pool of GOMAXPROCS block decoders),
// so one serves every Reader sharing a Cache, or one Reader without cache.
// Created without an input reader, it starts no goroutines, so an unclosed
// one is simply garbage collected.
type zstdDecoder struct {
	once sync.Once
	dec  *zstd.Decoder
	err  error
}

func (z *zstdDecoder) get() (*zstd.Decoder, error) {
	z.once.Do(func() {
		z.dec, z.err = zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)),
			zstd.WithDecoderMaxMemory(maxBlockLen),
			zstd.WithDecodeAllCapLimit(true))
	})
	return z.dec, z.err
}

func (z *zstdDecoder) close() {
	// Make a later get fail rather than race with a concurrent creation.
	z.once.Do(func() { z.err = fmt.Errorf("zstd decoder closed") })
	if z.dec != nil {
		z.dec.Close()
	}
}

// decodedLen returns the decoded size of a stored block of type typ,
// refusing one above limit, so that nothing is allocated for a damaged
// block's claim.
func decodedLen(typ byte, src []byte, limit uint64) (int, error) {
	limit = min(limit, maxBlockLen)
	switch typ {
	case blockTypeS2:
		n, err := s2.DecodedLen(src)
		if err != nil || uint64(n) > limit {
			return 0, fmt.Errorf("s2 block: bad decoded length: %w", base.ErrCorruption)
		}
		return n, nil
	case blockTypeZstd:
		n, k := binary.Uvarint(src)
		if k <= 0 || n > limit {
			return 0, fmt.Errorf("zstd block: bad decoded length: %w", base.ErrCorruption)
		}
		return int(n), nil
	}
	return 0, fmt.Errorf("unknown block type %d: %w", typ, base.ErrCorruption)
}

// decompress decodes a stored block of type typ into dst, whose length is
// its decodedLen.
func decompress(typ byte, src, dst []byte, zd *zstdDecoder) error {
	switch typ {
	case blockTypeS2:
		out, err := s2.Decode(dst, src)
		if err != nil || !sameBytes(out, dst) {
			return fmt.Errorf("s2 block: %v: %w", err, base.ErrCorruption)
		}
		return nil
	case blockTypeZstd:
		_, k := binary.Uvarint(src)
		dec, err := zd.get()
		if err != nil {
			return err
		}
		out, err := dec.DecodeAll(src[k:], dst[:0])
		if err != nil || !sameBytes(out, dst) {
			return fmt.Errorf("zstd block: decoded %d of %d bytes (%v): %w", len(out), len(dst), err, base.ErrCorruption)
		}
		return nil
	}
	return fmt.Errorf("unknown block type %d: %w", typ, base.ErrCorruption)
}

// sameBytes reports whether a decoder's output is dst itself, filled: one
// that outgrew dst was given a block longer than its header said.
func sameBytes(out, dst []byte) bool {
	return len(out) == len(dst) && (len(dst) == 0 || &out[0] == &dst[0])
}
