package odata

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tabuladb/tabula/internal/base"
)

// edgeProperties holds every type's edge values.
func edgeProperties(t testing.TB) []Property {
	g, _ := ParseGuid("c9da6455-213d-42c9-9a79-3e9149a57833")
	seven, ok := ParseDateTime("2024-02-29T23:59:59.1234567Z")
	if !ok {
		t.Fatal("bad date")
	}
	return []Property{
		{"Str", StringValue("héllo \"quoted\" \\ \n\t\u0001 😀")},
		{"Empty", StringValue("")},
		{"I32Min", Int32Value(math.MinInt32)},
		{"I32Max", Int32Value(math.MaxInt32)},
		{"I64Min", Int64Value(math.MinInt64)},
		{"I64Max", Int64Value(math.MaxInt64)},
		{"DblWhole", DoubleValue(1)},
		{"DblFrac", DoubleValue(-2.75)},
		{"DblBig", DoubleValue(math.MaxFloat64)},
		{"DblTiny", DoubleValue(math.SmallestNonzeroFloat64)},
		{"DblNegZero", DoubleValue(math.Copysign(0, -1))},
		{"DblNaN", DoubleValue(math.NaN())},
		{"DblInf", DoubleValue(math.Inf(1))},
		{"DblNegInf", DoubleValue(math.Inf(-1))},
		{"True", BoolValue(true)},
		{"False", BoolValue(false)},
		{"DtMin", DateTimeValue(MinDateTime)},
		{"DtMax", DateTimeValue(MaxDateTime)},
		{"Dt7", DateTimeValue(seven)},
		{"Guid", GuidValue(g)},
		{"Bin", BinaryValue([]byte{0, 1, 0xfe, 0xff})},
		{"BinEmpty", BinaryValue(nil)},
	}
}

func sameProperties(a, b []Property) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || !a[i].Value.Identical(b[i].Value) {
			return false
		}
	}
	return true
}

func TestEncodingRoundTrip(t *testing.T) {
	props := edgeProperties(t)
	ts, _ := ParseDateTime("2021-04-06T21:03:31.9231271Z")
	enc := AppendEncoded(nil, ts, props)
	if enc[0] != encodingVersion {
		t.Fatalf("version byte %d", enc[0])
	}
	gotTS, got, err := DecodeEncoded(enc)
	if err != nil {
		t.Fatal(err)
	}
	if gotTS != ts || !sameProperties(got, props) {
		t.Fatalf("round trip differs:\n got %v %v\nwant %v %v", gotTS, got, ts, props)
	}
	if ets, err := EncodedTimestamp(enc); err != nil || ets != ts {
		t.Errorf("EncodedTimestamp = %v, %v", ets, err)
	}
	var e Entity
	if err := DecodeEntityBinary(AppendEncoded(nil, 0, nil), &e); err != nil || len(e.Properties) != 0 {
		t.Errorf("empty entity: %v %v", e, err)
	}
}

// TestEncodingCorruption feeds every truncation and many random mutations of
// a valid value to the decoder: errors, never panics.
func TestEncodingCorruption(t *testing.T) {
	enc := AppendEncoded(nil, 12345, edgeProperties(t))
	for n := 0; n < len(enc); n++ {
		if _, _, err := DecodeEncoded(enc[:n]); err == nil {
			t.Fatalf("truncation to %d bytes decoded", n)
		} else if !errors.Is(err, base.ErrCorruption) {
			t.Fatalf("error does not wrap ErrCorruption: %v", err)
		}
	}
	if _, _, err := DecodeEncoded(append(append([]byte{}, enc...), 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
	bad := append([]byte{}, enc...)
	bad[0] = 2
	if _, _, err := DecodeEncoded(bad); err == nil {
		t.Fatal("unknown version accepted")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	plan, err := PlanQuery("Str eq 'x' or Bin gt X'00' or Timestamp gt datetime'2000-01-01T00:00:00Z'")
	if err != nil {
		t.Fatal(err)
	}
	jsonEnc := NewEncoder(EncodeOptions{Metadata: FullMetadata})
	for range 20000 {
		m := append([]byte{}, enc...)
		for range 1 + rng.IntN(4) {
			m[rng.IntN(len(m))] = byte(rng.Uint32())
		}
		DecodeEncoded(m)                           //nolint:errcheck // only checking for panics
		plan.Match(nil, nil, m)                    //nolint:errcheck
		jsonEnc.AppendEntity(nil, nil, nil, "", m) //nolint:errcheck
	}
	for range 20000 {
		m := make([]byte, rng.IntN(40))
		for i := range m {
			m[i] = byte(rng.Uint32())
		}
		if len(m) > 0 {
			m[0] = encodingVersion
		}
		DecodeEncoded(m) //nolint:errcheck
	}
}

// TestEncodingExample pins the example in docs/entity-encoding.md.
func TestEncodingExample(t *testing.T) {
	ts, _ := ParseDateTime("2021-04-06T21:03:31.9231271Z")
	got := AppendEncoded(nil, ts, []Property{{"Age", Int32Value(42)}, {"Name", StringValue("Jo")}})
	want := []byte{
		0x01,
		0x27, 0x2F, 0x58, 0x6F, 0x3F, 0xF9, 0xD8, 0x08,
		0x02,
		0x03, 'A', 'g', 'e', 0x02, 0x2A, 0x00, 0x00, 0x00,
		0x04, 'N', 'a', 'm', 'e', 0x01, 0x02, 'J', 'o',
	}
	if string(got) != string(want) {
		t.Errorf("ticks %d (%#x)\n got % X\nwant % X", int64(ts), int64(ts), got, want)
	}
}
