package main

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
)

// Keys imitate Tabula's clustered-index keys, account/table/PartitionKey/
// RowKey, so that prefix compression, comparisons and bloom filters see the
// long shared prefixes a real table produces:
//
//	devstoreaccount1/t0001/pk000123/rk000042
//
// Key i lives in partition i/rowsPerPartition with RowKey 2*(i%rowsPerPartition):
// keys of increasing i sort in increasing order, which fillseq relies on.
// The odd RowKeys in between are the "missing" keys: same shape and length,
// interleaved with the present ones, so a lookup of one lands inside a
// table's key range and only the bloom filter (or a block search) can tell
// it is absent.
const (
	keyPrefix        = "devstoreaccount1/t0001/pk"
	rkInfix          = "/rk"
	pkDigits         = 6
	rkDigits         = 6
	keyLen           = len(keyPrefix) + pkDigits + len(rkInfix) + rkDigits
	rowsPerPartition = 100
	// maxKeys is the size of the key space the fixed-width digits can hold.
	maxKeys = 1_000_000 * rowsPerPartition
)

// Values are valueLen bytes: an 8-byte stamp holding the key's index (so a
// read can check it got the right key's value), randomLen-8 random bytes and
// a repeated pattern for the rest. The random half does not compress and the
// pattern half nearly vanishes, so Snappy and S2 both shrink a data block of
// values about 2:1 (TestValueCompressibility checks it).
const (
	valueLen  = 256
	randomLen = 128
	pattern   = "tabula-bench-pad"
)

// entryLen is the logical size of one written entry, key plus value: what
// the amplification figures divide by.
const entryLen = int64(keyLen + valueLen)

// appendKey appends the key of index i (a present key) or, if missing, the
// absent key right after it.
func appendKey(dst []byte, i int, missing bool) []byte {
	pk := i / rowsPerPartition
	rk := 2 * (i % rowsPerPartition)
	if missing {
		rk++
	}
	dst = append(dst, keyPrefix...)
	dst = appendDigits(dst, pk, pkDigits)
	dst = append(dst, rkInfix...)
	return appendDigits(dst, rk, rkDigits)
}

// appendDigits appends v in decimal, zero-padded to width. It is the hot
// path of every workload, hence no fmt.
func appendDigits(dst []byte, v, width int) []byte {
	n := len(dst)
	for range width {
		dst = append(dst, '0')
	}
	for i := len(dst) - 1; i >= n && v > 0; i-- {
		dst[i] = byte('0' + v%10)
		v /= 10
	}
	return dst
}

// checkKeySpace rejects key counts the fixed-width key format cannot hold.
func checkKeySpace(n int) error {
	if n <= 0 || n > maxKeys {
		return fmt.Errorf("key count %d out of range 1..%d", n, maxKeys)
	}
	return nil
}

// valueGen fills values. Each goroutine needs its own: it owns an RNG.
type valueGen struct {
	rng *rand.Rand
}

func newValueGen(seed uint64) *valueGen {
	return &valueGen{rng: rand.New(rand.NewPCG(seed, 0x76616c7565))}
}

// fill writes the value for key index i into v, which must be valueLen long.
func (g *valueGen) fill(v []byte, i int) {
	binary.BigEndian.PutUint64(v[:8], uint64(i))
	for j := 8; j < randomLen; j += 8 {
		binary.LittleEndian.PutUint64(v[j:j+8], g.rng.Uint64())
	}
	for j := randomLen; j < valueLen; j += len(pattern) {
		copy(v[j:], pattern)
	}
}

// valueIndex returns the key index stamped in a value, or -1 if the value
// is not one of ours.
func valueIndex(v []byte) int {
	if len(v) != valueLen || string(v[randomLen:randomLen+len(pattern)]) != pattern {
		return -1
	}
	return int(binary.BigEndian.Uint64(v[:8]))
}

// permutation returns a random permutation of 0..n-1 fixed by seed, so that
// every engine fills the same keys in the same order. uint32 halves its
// footprint, which counts in every engine's RSS alike.
func permutation(n int, seed uint64) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = uint32(i)
	}
	rng := rand.New(rand.NewPCG(seed, 0x7065726d))
	rng.Shuffle(n, func(i, j int) { p[i], p[j] = p[j], p[i] })
	return p
}
