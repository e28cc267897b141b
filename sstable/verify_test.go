package sstable

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/tabuladb/tabula/internal/base"
)

// TestVerify checks that an intact table passes and that flipping any one
// bit of it, anywhere, fails with a VerifyError naming an offset inside
// the damaged part. Every byte of a table is covered by a checksum or is
// checked structure, so no flip may pass.
func TestVerify(t *testing.T) {
	for _, comp := range []Compression{NoCompression, S2Compression} {
		t.Run(comp.String(), func(t *testing.T) {
			var all []kv
			for i := range 300 {
				k := fmt.Appendf(nil, "pk%03d|row%05d", i/20, i)
				kind := base.KindSet
				if i%10 == 3 {
					kind = base.KindDelete
				}
				all = append(all, kv{base.MakeInternalKey(k, base.SeqNum(i+1), kind), fmt.Appendf(nil, "value-%d", i)})
			}
			data, _ := buildTable(t, all, WriterOptions{Compression: comp, Split: splitAtBar, BlockSize: 512})
			s, err := Verify(newMemFile(data), int64(len(data)))
			if err != nil {
				t.Fatalf("intact table: %v", err)
			}
			if s.Entries != uint64(len(all)) || s.Blocks < 3 || base.InternalCompare(s.First, all[0].key) != 0 || base.InternalCompare(s.Last, all[len(all)-1].key) != 0 {
				t.Fatalf("summary %+v does not describe the table (%d entries)", s, len(all))
			}
			ft := readFooterForTest(t, data)
			r := openTable(t, data, ReaderOptions{})
			part := func(off int) (string, uint64, uint64) {
				u := uint64(off)
				for i := range r.index.len() {
					if h := r.index.handle(i); u >= h.offset && u < h.end() {
						return fmt.Sprintf("data block %d", i), h.offset, h.end()
					}
				}
				for _, p := range []struct {
					name string
					h    blockHandle
				}{{"filter block", ft.filter}, {"index block", ft.index}, {"properties block", ft.properties}} {
					if u >= p.h.offset && u < p.h.end() {
						return p.name, p.h.offset, p.h.end()
					}
				}
				return "footer", uint64(len(data) - footerLen), uint64(len(data))
			}
			seen := map[string]bool{}
			for off := range data {
				bad := slices.Clone(data)
				bad[off] ^= 1 << (off % 8)
				_, err := Verify(newMemFile(bad), int64(len(bad)))
				name, lo, hi := part(off)
				seen[name[:4]] = true
				var ve *VerifyError
				if !errors.As(err, &ve) {
					t.Fatalf("flip at %d (%s): Verify = %v, want a VerifyError", off, name, err)
				}
				// Damage to a block is found at that block, or (a flipped
				// filter bit) when a key is missing from the filter.
				if (uint64(ve.Offset) < lo || uint64(ve.Offset) >= hi) && !(name == "filter block" && ve.What == "filter block") {
					t.Fatalf("flip at %d in %s [%d, %d): error names offset %d: %v", off, name, lo, hi, ve.Offset, err)
				}
			}
			for _, p := range []string{"data", "filt", "inde", "prop", "foot"} {
				if !seen[p] {
					t.Errorf("no byte of the %s part was flipped", p)
				}
			}
			r.Close()
		})
	}
}
