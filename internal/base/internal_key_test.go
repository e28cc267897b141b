package base

import (
	"bytes"
	"testing"
)

func TestInternalCompareOrdersNewestFirst(t *testing.T) {
	keys := []InternalKey{
		MakeInternalKey([]byte("a"), 9, KindSet),
		MakeInternalKey([]byte("a"), 9, KindDelete),
		MakeInternalKey([]byte("a"), 3, KindSet),
		MakeInternalKey([]byte("a\x00"), SeqNumMax, KindSet),
		MakeInternalKey([]byte("b"), 1, KindDelete),
	}
	for i := range keys {
		for j := range keys {
			got := InternalCompare(keys[i], keys[j])
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got != want {
				t.Errorf("InternalCompare(%s, %s) = %d, want %d", keys[i], keys[j], got, want)
			}
		}
	}
}

func TestSearchKeySortsBeforeVisibleVersions(t *testing.T) {
	search := MakeSearchKey([]byte("k"), 7)
	for _, k := range []InternalKey{
		MakeInternalKey([]byte("k"), 7, KindSet),
		MakeInternalKey([]byte("k"), 7, KindDelete),
		MakeInternalKey([]byte("k"), 1, KindSet),
	} {
		if InternalCompare(search, k) > 0 {
			t.Errorf("search key %s sorts after visible %s", search, k)
		}
	}
	if InternalCompare(search, MakeInternalKey([]byte("k"), 8, KindDelete)) < 0 {
		t.Errorf("search key sorts before an invisible newer version")
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	k := MakeInternalKey([]byte("user/key"), 123456789, KindDelete)
	buf := make([]byte, k.Size())
	k.Encode(buf)
	if !bytes.Equal(buf, k.AppendEncoded(nil)) {
		t.Fatalf("Encode and AppendEncoded disagree")
	}
	got, ok := DecodeInternalKey(buf)
	if !ok || !bytes.Equal(got.UserKey, k.UserKey) || got.Trailer != k.Trailer {
		t.Fatalf("round trip: got %s ok=%v, want %s", got, ok, k)
	}
	if _, ok := DecodeInternalKey(buf[:7]); ok {
		t.Fatalf("decoded a key shorter than a trailer")
	}
}
