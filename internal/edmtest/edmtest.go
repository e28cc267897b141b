// Package edmtest holds test fixtures shared by the tests of several
// packages: entities with every Edm type at its edges, an exact
// comparison of entities, and of whole stores.
package edmtest

import (
	"bytes"
	"math"
	"strings"

	"github.com/tabuladb/tabula/odata"
)

// EdgeEntities returns entities holding every Edm type at its edges, in
// (PartitionKey, RowKey) order.
func EdgeEntities() []*odata.Entity {
	g, _ := odata.ParseGuid("01234567-89ab-cdef-0123-456789abcdef")
	maxG, _ := odata.ParseGuid("ffffffff-ffff-ffff-ffff-ffffffffffff")
	return []*odata.Entity{
		{PartitionKey: "", RowKey: "", Properties: nil},
		{PartitionKey: "edge", RowKey: "bytes", Properties: []odata.Property{
			{Name: "Empty", Value: odata.BinaryValue(nil)},
			{Name: "All", Value: odata.BinaryValue(allBytes())},
			{Name: "Big", Value: odata.BinaryValue(bytes.Repeat([]byte{0xfe, 0}, odata.MaxBinaryLength/2))},
			{Name: "G", Value: odata.GuidValue(g)},
			{Name: "GMax", Value: odata.GuidValue(maxG)},
			{Name: "GZero", Value: odata.GuidValue(odata.Guid{})},
		}},
		{PartitionKey: "edge", RowKey: "doubles", Properties: []odata.Property{
			{Name: "NaN", Value: odata.DoubleValue(math.NaN())},
			{Name: "PosInf", Value: odata.DoubleValue(math.Inf(1))},
			{Name: "NegInf", Value: odata.DoubleValue(math.Inf(-1))},
			{Name: "NegZero", Value: odata.DoubleValue(math.Copysign(0, -1))},
			{Name: "Zero", Value: odata.DoubleValue(0)},
			{Name: "MaxFloat", Value: odata.DoubleValue(math.MaxFloat64)},
			{Name: "Denormal", Value: odata.DoubleValue(math.SmallestNonzeroFloat64)},
			{Name: "Third", Value: odata.DoubleValue(1.0 / 3)},
			{Name: "Whole", Value: odata.DoubleValue(2)},
		}},
		{PartitionKey: "edge", RowKey: "ints", Properties: []odata.Property{
			{Name: "I32Min", Value: odata.Int32Value(math.MinInt32)},
			{Name: "I32Max", Value: odata.Int32Value(math.MaxInt32)},
			{Name: "I32Zero", Value: odata.Int32Value(0)},
			{Name: "I64Min", Value: odata.Int64Value(math.MinInt64)},
			{Name: "I64Max", Value: odata.Int64Value(math.MaxInt64)},
			{Name: "I64Beyond53", Value: odata.Int64Value(1<<53 + 1)},
			{Name: "BoolT", Value: odata.BoolValue(true)},
			{Name: "BoolF", Value: odata.BoolValue(false)},
		}},
		{PartitionKey: "edge", RowKey: "strings", Properties: []odata.Property{
			{Name: "Empty", Value: odata.StringValue("")},
			{Name: "Controls", Value: odata.StringValue("\x00\x01\t\n\"\\\u2028</script>")},
			{Name: "Unicode", Value: odata.StringValue("日本語 😀 é")},
			{Name: "NotUTF8", Value: odata.StringValue("a\xff\xfeb")},
			{Name: "LooksLikeNumber", Value: odata.StringValue("123")},
			{Name: "Long", Value: odata.StringValue(strings.Repeat("x", odata.MaxStringLength))},
		}},
		{PartitionKey: "edge", RowKey: "times", Properties: []odata.Property{
			{Name: "Min", Value: odata.DateTimeValue(odata.MinDateTime)},
			{Name: "Max", Value: odata.DateTimeValue(odata.MaxDateTime)},
			{Name: "Tick", Value: odata.DateTimeValue(odata.MinDateTime + 1)},
			{Name: "Odd", Value: odata.DateTimeValue(638400000001234567)},
		}},
		{PartitionKey: "ключ 🔑", RowKey: "\xffraw", Timestamp: 638400000001234567, Properties: []odata.Property{
			{Name: "Ünïcödé_name", Value: odata.StringValue("v")},
		}},
	}
}

func allBytes() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

// Same compares keys, timestamp and properties bit for bit, in order.
func Same(a, b *odata.Entity) bool {
	if a.PartitionKey != b.PartitionKey || a.RowKey != b.RowKey || a.Timestamp != b.Timestamp || len(a.Properties) != len(b.Properties) {
		return false
	}
	for i := range a.Properties {
		if a.Properties[i].Name != b.Properties[i].Name || !a.Properties[i].Value.Identical(b.Properties[i].Value) {
			return false
		}
	}
	return true
}
