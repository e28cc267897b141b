package sstable

import (
	"encoding/binary"
	"fmt"

	"github.com/bits-and-blooms/bitset"
	"github.com/bits-and-blooms/bloom/v3"
	"github.com/cespare/xxhash/v2"
	"github.com/tabuladb/tabula/internal/base"
	"github.com/tabuladb/tabula/internal/manual"
)

// The filter is a cache-local bloom filter: its bits are split into lines
// of 512 bits (one 64-byte CPU cache line), the key's hash picks one line,
// and all k probes fall inside it. A lookup of a missing key then costs one
// cache miss instead of k, at the price of a slightly higher false positive
// rate than a classic bloom filter of the same size (about 1% instead of
// 0.8% at 10 bits per key).
//
// Every key is hashed once with xxhash64. The high 32 bits choose the line
// (multiply-shift, so any number of lines works); the low 32 bits g give
// the probes: probe i sets bit g_i >> 23 of the line, with g_0 = g and
// g_{i+1} = g_i * 0x9e3779b9 (mod 2^32), a multiplicative sequence whose
// top bits are well mixed. The bits live in a bloom.BloomFilter's bitset,
// set and tested directly so that a lookup allocates nothing.
//
// Whole user keys and Split prefixes share one filter. A prefix is hashed
// as fmix(xxhash64(prefix) ^ prefixHashMarker), a bijection of its plain
// hash, so the prefix "p" and the whole key "p" land on unrelated bits.
const (
	filterLineBits   = 512
	filterLineShift  = 32 - 9 // the probe's bit within its line: top 9 bits of g
	filterProbeMul   = 0x9e3779b9
	prefixHashMarker = 0x70726566_69787878 // "prefixxx"
	maxFilterProbes  = 30
)

func keyHash(userKey []byte) uint64 { return xxhash.Sum64(userKey) }

func prefixHash(prefix []byte) uint64 {
	h := xxhash.Sum64(prefix) ^ prefixHashMarker
	h *= 0xff51afd7ed558ccd
	return h ^ h>>33
}

// numProbes is the number of probes per key for bitsPerKey: bitsPerKey*ln 2
// minimises the false positive rate of a classic bloom filter; a
// cache-local filter does best with slightly fewer.
func numProbes(bitsPerKey int) uint {
	k := uint(bitsPerKey * 65 / 100)
	return max(1, min(k, maxFilterProbes))
}

// filterBuilder collects key hashes while a table is written; the filter is
// sized at the end, when the number of keys is known.
type filterBuilder struct {
	bitsPerKey int
	hashes     []uint64
}

func (b *filterBuilder) add(h uint64) { b.hashes = append(b.hashes, h) }

// estimatedSize is the size of the filter block finish would return now.
func (b *filterBuilder) estimatedSize() int {
	return (len(b.hashes)*b.bitsPerKey+filterLineBits-1)/8 + 1 + blockTrailerLen
}

// finish returns the filter block contents:
//
//	bits: lines*64 bytes (little-endian uint64 words)  |  k: uint8
func (b *filterBuilder) finish() []byte {
	lines := max(1, (uint64(len(b.hashes))*uint64(b.bitsPerKey)+filterLineBits-1)/filterLineBits)
	k := numProbes(b.bitsPerKey)
	f := bloom.New(uint(lines*filterLineBits), k)
	bits := f.BitSet()
	for _, h := range b.hashes {
		base := ((h >> 32) * lines >> 32) * filterLineBits
		g := uint32(h)
		for range k {
			bits.Set(uint(base + uint64(g>>filterLineShift)))
			g *= filterProbeMul
		}
	}
	words := bits.Words()
	out := make([]byte, 0, len(words)*8+1)
	for _, w := range words {
		out = binary.LittleEndian.AppendUint64(out, w)
	}
	return append(out, byte(k))
}

// bloomFilter is a decoded filter block, kept in memory by a Reader for as
// long as the table is open; its bits live outside the Go heap, as the
// index does (index).
type bloomFilter struct {
	bits  *bitset.BitSet
	lines uint64
	k     uint32
	mem   manual.Buf
}

func decodeFilter(data []byte) (*bloomFilter, error) {
	if len(data) < 1+filterLineBits/8 || (len(data)-1)%(filterLineBits/8) != 0 {
		return nil, fmt.Errorf("filter block: bad length %d: %w", len(data), base.ErrCorruption)
	}
	k := uint32(data[len(data)-1])
	if k == 0 || k > maxFilterProbes {
		return nil, fmt.Errorf("filter block: bad probe count %d: %w", k, base.ErrCorruption)
	}
	mem := manual.New(len(data) - 1)
	words, _ := manual.Uint64s(mem.Bytes(), (len(data)-1)/8)
	for i := range words {
		words[i] = binary.LittleEndian.Uint64(data[8*i:])
	}
	m := uint(len(words) * 64)
	return &bloomFilter{
		bits:  bloom.FromWithM(words, m, uint(k)).BitSet(),
		lines: uint64(m / filterLineBits),
		k:     k,
		mem:   mem,
	}, nil
}

// free returns the filter's memory; it must not be used afterwards.
func (f *bloomFilter) free() {
	f.mem.Free()
	*f = bloomFilter{}
}

// mayContain reports whether a key with hash h may have been added.
func (f *bloomFilter) mayContain(h uint64) bool {
	base := ((h >> 32) * f.lines >> 32) * filterLineBits
	g := uint32(h)
	for range f.k {
		if !f.bits.Test(uint(base + uint64(g>>filterLineShift))) {
			return false
		}
		g *= filterProbeMul
	}
	return true
}
