package sstable

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/tabuladb/tabula/internal/base"
)

// falsePositiveRate builds a filter over n keys and probes it with n*10
// keys it does not hold.
func falsePositiveRate(t *testing.T, bitsPerKey, n int) float64 {
	t.Helper()
	b := filterBuilder{bitsPerKey: bitsPerKey}
	for i := range n {
		b.add(keyHash(fmt.Appendf(nil, "present-%d", i)))
	}
	f, err := decodeFilter(b.finish())
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if !f.mayContain(keyHash(fmt.Appendf(nil, "present-%d", i))) {
			t.Fatalf("false negative for key %d", i)
		}
	}
	fp := 0
	probes := 10 * n
	for i := range probes {
		if f.mayContain(keyHash(fmt.Appendf(nil, "absent-%d", i))) {
			fp++
		}
	}
	return float64(fp) / float64(probes)
}

func TestBloomFalsePositiveRate(t *testing.T) {
	for _, tc := range []struct {
		bits int
		max  float64
	}{
		{10, 0.02},
		{5, 0.15},
		{20, 0.001},
	} {
		for _, n := range []int{100, 10000, 50000} {
			rate := falsePositiveRate(t, tc.bits, n)
			t.Logf("%d bits/key, %d keys: false positive rate %.4f", tc.bits, n, rate)
			if rate > tc.max {
				t.Errorf("%d bits/key, %d keys: false positive rate %.4f > %.4f", tc.bits, n, rate, tc.max)
			}
		}
	}
}

func TestTableFilter(t *testing.T) {
	var all []kv
	for i := range 5000 {
		all = append(all, kv{base.MakeInternalKey(fmt.Appendf(nil, "key-%06d", 2*i), 1, base.KindSet), []byte("v")})
	}
	data, w := buildTable(t, all, WriterOptions{})
	if p := w.Properties(); p.FilterKeys != 5000 || p.BloomBitsPerKey != 10 || p.PrefixFilter {
		t.Fatalf("properties %+v", p)
	}
	r := openTable(t, data, ReaderOptions{})
	defer r.Close()
	fp := 0
	for i := range 5000 {
		if !r.MayContain(fmt.Appendf(nil, "key-%06d", 2*i)) {
			t.Fatalf("MayContain(key %d) = false", 2*i)
		}
		if r.MayContain(fmt.Appendf(nil, "key-%06d", 2*i+1)) {
			fp++
		}
		if !r.MayContainPrefix([]byte("anything")) {
			t.Fatal("MayContainPrefix without prefix filter = false")
		}
	}
	if fp > 100 {
		t.Fatalf("%d false positives in 5000", fp)
	}

	// Without a filter every key may be present.
	data, _ = buildTable(t, all, WriterOptions{BloomBitsPerKey: -1})
	r2 := openTable(t, data, ReaderOptions{})
	defer r2.Close()
	if !r2.MayContain([]byte("nope")) || r2.Properties().FilterSize != 0 {
		t.Fatal("table without filter ruled a key out")
	}
}

// splitAtBar returns the length of the key up to and including its first
// '|', like a partition key prefix.
func splitAtBar(k []byte) int {
	if i := bytes.IndexByte(k, '|'); i >= 0 {
		return i + 1
	}
	return len(k)
}

func TestPrefixFilter(t *testing.T) {
	var all []kv
	for pk := range 200 {
		for rk := range 20 {
			k := fmt.Appendf(nil, "pk%04d|rk%03d", 2*pk, rk)
			all = append(all, kv{base.MakeInternalKey(k, 1, base.KindSet), []byte("v")})
		}
	}
	data, w := buildTable(t, all, WriterOptions{Split: splitAtBar})
	if p := w.Properties(); !p.PrefixFilter || p.FilterKeys != 200*20+200 {
		t.Fatalf("properties %+v", p)
	}
	r := openTable(t, data, ReaderOptions{})
	defer r.Close()
	if !r.Properties().PrefixFilter {
		t.Fatal("reader lost the prefix filter property")
	}
	fp, wholeAsPrefix := 0, 0
	for pk := range 200 {
		if !r.MayContainPrefix(fmt.Appendf(nil, "pk%04d|", 2*pk)) {
			t.Fatalf("MayContainPrefix(pk %d) = false", 2*pk)
		}
		if r.MayContainPrefix(fmt.Appendf(nil, "pk%04d|", 2*pk+1)) {
			fp++
		}
		// A whole key is not a prefix: domain separation.
		if r.MayContainPrefix(fmt.Appendf(nil, "pk%04d|rk001", 2*pk)) {
			wholeAsPrefix++
		}
		// And a prefix is not a whole key.
		if r.MayContain(fmt.Appendf(nil, "pk%04d|", 2*pk)) {
			wholeAsPrefix++
		}
	}
	if fp > 10 || wholeAsPrefix > 20 {
		t.Fatalf("prefix false positives %d/200, cross-domain hits %d/400", fp, wholeAsPrefix)
	}
}

func TestDecodeFilterRejectsGarbage(t *testing.T) {
	for _, data := range [][]byte{nil, {7}, make([]byte, 64), append(make([]byte, 64), 0), append(make([]byte, 64), 31)} {
		if _, err := decodeFilter(data); err == nil {
			t.Errorf("decodeFilter(%d bytes) succeeded", len(data))
		}
	}
}
