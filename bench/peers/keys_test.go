package main

import (
	"bytes"
	"regexp"
	"testing"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/s2"
)

var keyShape = regexp.MustCompile(`^devstoreaccount1/t0001/pk[0-9]{6}/rk[0-9]{6}$`)

func TestKeyShape(t *testing.T) {
	for _, i := range []int{0, 1, 99, 100, 12345, 999_999, maxKeys - 1} {
		for _, missing := range []bool{false, true} {
			k := appendKey(nil, i, missing)
			if !keyShape.Match(k) {
				t.Errorf("key %d (missing %v) = %q, not account/table/pk/rk shaped", i, missing, k)
			}
			if len(k) != keyLen || len(k) < 20 || len(k) > 40 {
				t.Errorf("key %q is %d bytes, want %d within 20..40", k, len(k), keyLen)
			}
		}
	}
	if got := string(appendKey(nil, 12345, false)); got != "devstoreaccount1/t0001/pk000123/rk000090" {
		t.Errorf("key 12345 = %s", got)
	}
	if err := checkKeySpace(maxKeys + 1); err == nil {
		t.Errorf("checkKeySpace accepted more keys than the format holds")
	}
}

// TestKeyOrder checks that key order is index order (fillseq writes in
// ascending key order) and that each missing key sorts strictly between
// its present neighbours, so it is absent but inside the key range.
func TestKeyOrder(t *testing.T) {
	var prev []byte
	check := func(i int) {
		k := appendKey(nil, i, false)
		m := appendKey(nil, i, true)
		if prev != nil && bytes.Compare(prev, k) >= 0 {
			t.Fatalf("key %d %q does not sort after the previous key %q", i, k, prev)
		}
		next := appendKey(nil, i+1, false)
		if bytes.Compare(k, m) >= 0 || bytes.Compare(m, next) >= 0 {
			t.Fatalf("missing key %q not strictly between %q and %q", m, k, next)
		}
		prev = k
	}
	for i := range 250_000 {
		check(i)
	}
	prev = nil
	for i := maxKeys - 1000; i < maxKeys-1; i++ {
		check(i)
	}
}

func TestValues(t *testing.T) {
	g := newValueGen(1)
	v := make([]byte, valueLen)
	g.fill(v, 4242)
	if got := valueIndex(v); got != 4242 {
		t.Errorf("valueIndex = %d, want 4242", got)
	}
	w := make([]byte, valueLen)
	g.fill(w, 4242)
	if bytes.Equal(v, w) {
		t.Errorf("two values of one key are identical: overwrites would write nothing new")
	}
	if valueIndex(v[:100]) != -1 || valueIndex(make([]byte, valueLen)) != -1 {
		t.Errorf("valueIndex accepted a foreign value")
	}
}

// TestValueCompressibility checks the 2:1 target with both compressors in
// play on a 4 KiB block's worth of values, which is how the engines
// compress them. A lone 256-byte value compresses less (about 1.4:1 with
// Snappy): on so short an input the encoder's fixed costs and its skipping
// through the random half dominate; it is only checked to compress at all.
func TestValueCompressibility(t *testing.T) {
	g := newValueGen(7)
	v := make([]byte, valueLen)
	var block []byte
	for i := range 4096 / valueLen {
		g.fill(v, 1000+i)
		block = append(block, v...)
	}
	for name, compress := range map[string]func([]byte) []byte{
		"snappy": func(b []byte) []byte { return snappy.Encode(nil, b) },
		"s2":     func(b []byte) []byte { return s2.Encode(nil, b) },
	} {
		r := float64(len(block)) / float64(len(compress(block)))
		t.Logf("%s, 4 KiB block: %.2f:1", name, r)
		if r < 1.75 || r > 2.25 {
			t.Errorf("%s compresses a block of values %.2f:1, want about 2:1", name, r)
		}
		r = float64(len(v)) / float64(len(compress(v)))
		t.Logf("%s, one value: %.2f:1", name, r)
		if r < 1.2 {
			t.Errorf("%s compresses one value only %.2f:1", name, r)
		}
	}
}

func TestPermutation(t *testing.T) {
	p := permutation(10_000, 3)
	seen := make([]bool, len(p))
	inOrder := 0
	for i, x := range p {
		if seen[x] {
			t.Fatalf("%d appears twice", x)
		}
		seen[x] = true
		if int(x) == i {
			inOrder++
		}
	}
	if inOrder > 100 {
		t.Errorf("%d of 10000 elements in place: not shuffled", inOrder)
	}
	q := permutation(10_000, 3)
	for i := range p {
		if p[i] != q[i] {
			t.Fatalf("same seed, different permutations at %d", i)
		}
	}
}
