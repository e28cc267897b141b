package odata

import (
	"math"
	"strings"
	"testing"
)

func mustDecode(t *testing.T, body string) DecodedEntity {
	t.Helper()
	d, err := DecodeEntityJSON([]byte(body))
	if err != nil {
		t.Fatalf("DecodeEntityJSON(%.200s): %v", body, err)
	}
	return d
}

func TestDecodeInference(t *testing.T) {
	for _, tc := range []struct {
		json string
		want Value
	}{
		{`"abc"`, StringValue("abc")},
		{`""`, StringValue("")},
		{`"a\"b\\c\/d\n\u00e9\ud83d\ude00"`, StringValue("a\"b\\c/d\né😀")},
		{`"\ud800x"`, StringValue("\ufffdx")}, // lone surrogate
		{`42`, Int32Value(42)},
		{`-0`, Int32Value(0)},
		{`2147483647`, Int32Value(math.MaxInt32)},
		{`-2147483648`, Int32Value(math.MinInt32)},
		{`2147483648`, DoubleValue(2147483648)}, // beyond Int32: Double, as the service infers
		{`5000000000`, DoubleValue(5e9)},
		{`20.0`, DoubleValue(20)}, // a fraction makes it Double even when whole
		{`1.5`, DoubleValue(1.5)},
		{`1e3`, DoubleValue(1000)},
		{`-2.5E-3`, DoubleValue(-0.0025)},
		{`true`, BoolValue(true)},
		{`false`, BoolValue(false)},
	} {
		d := mustDecode(t, `{"P":`+tc.json+`}`)
		if len(d.Properties) != 1 || !d.Properties[0].Value.Identical(tc.want) {
			t.Errorf("%s decoded to %v, want %v", tc.json, d.Properties, tc.want)
		}
	}
}

func TestDecodeAnnotated(t *testing.T) {
	g, _ := ParseGuid("c9da6455-213d-42c9-9a79-3e9149a57833")
	dt, _ := ParseDateTime("2024-01-02T03:04:05.1234567Z")
	for _, tc := range []struct {
		typ, json string
		want      Value
	}{
		{"Edm.String", `"x"`, StringValue("x")},
		{"Edm.Int32", `7`, Int32Value(7)},
		{"Edm.Int32", `"-7"`, Int32Value(-7)},
		{"Edm.Int64", `"9223372036854775807"`, Int64Value(math.MaxInt64)},
		{"Edm.Int64", `"-9223372036854775808"`, Int64Value(math.MinInt64)},
		{"Edm.Int64", `12`, Int64Value(12)},
		{"Edm.Double", `1`, DoubleValue(1)},
		{"Edm.Double", `"2.5"`, DoubleValue(2.5)},
		{"Edm.Double", `"NaN"`, DoubleValue(math.NaN())},
		{"Edm.Double", `"Infinity"`, DoubleValue(math.Inf(1))},
		{"Edm.Double", `"-Infinity"`, DoubleValue(math.Inf(-1))},
		{"Edm.Double", `1.7976931348623157e308`, DoubleValue(math.MaxFloat64)},
		{"Edm.Boolean", `true`, BoolValue(true)},
		{"Edm.Boolean", `"False"`, BoolValue(false)},
		{"Edm.DateTime", `"2024-01-02T03:04:05.1234567Z"`, DateTimeValue(dt)},
		{"Edm.DateTime", `"2024-01-02T05:04:05.1234567+02:00"`, DateTimeValue(dt)},
		{"Edm.Guid", `"C9DA6455-213D-42C9-9A79-3E9149A57833"`, GuidValue(g)},
		{"Edm.Binary", `"AAEC"`, BinaryValue([]byte{0, 1, 2})},
		{"Edm.Binary", `""`, BinaryValue([]byte{})},
	} {
		// The annotation may come before or after the value.
		for _, body := range []string{
			`{"P@odata.type":"` + tc.typ + `","P":` + tc.json + `}`,
			`{"P":` + tc.json + `,"P@odata.type":"` + tc.typ + `"}`,
		} {
			d := mustDecode(t, body)
			if len(d.Properties) != 1 || !d.Properties[0].Value.Identical(tc.want) {
				t.Errorf("%s decoded to %v, want %v", body, d.Properties, tc.want)
			}
		}
	}
}

func TestDecodeSystemAndIgnored(t *testing.T) {
	d := mustDecode(t, `{"odata.metadata":"x","odata.etag":"W/\"1\"","odata.type":"a.b",
		"PartitionKey":"p","RowKey":"","Timestamp":"2024-01-01T00:00:00Z","Timestamp@odata.type":"Edm.DateTime",
		"A@custom.note":{"x":[1,2]},"Gone":null,"Gone2@odata.type":"Edm.Int64","Gone2":null,"Kept":1}`)
	if !d.HasPartitionKey || !d.HasRowKey || d.PartitionKey != "p" || d.RowKey != "" {
		t.Errorf("keys: %+v", d)
	}
	if d.Timestamp != 0 {
		t.Errorf("Timestamp from the body was not ignored: %v", d.Timestamp)
	}
	if len(d.Properties) != 1 || d.Properties[0].Name != "Kept" {
		t.Errorf("properties = %v, want only Kept", d.Properties)
	}
	d = mustDecode(t, `{"A":1}`)
	if d.HasPartitionKey || d.HasRowKey {
		t.Error("keys reported present")
	}
	d = mustDecode(t, " \n{}\t")
	if len(d.Properties) != 0 {
		t.Error("empty object has properties")
	}
	if _, err := DecodeEntityJSON([]byte(`{"PartitionKey@odata.type":"Edm.String","PartitionKey":"p"}`)); err != nil {
		t.Errorf("annotated key: %v", err)
	}
}

func TestDecodeErrors(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	props := func(n int) string {
		var b strings.Builder
		b.WriteString(`{"PartitionKey":"p","RowKey":"r"`)
		for i := range n {
			b.WriteString(`,"P` + itoa(i) + `":1`)
		}
		return b.String() + "}"
	}
	bigString := func(n int) string { return `{"S":"` + long(n) + `"}` }
	for _, tc := range []struct {
		name, body, code string
	}{
		{"not json", `{"A":}`, CodeInvalidInput},
		{"truncated", `{"A":1`, CodeInvalidInput},
		{"trailing data", `{"A":1} x`, CodeInvalidInput},
		{"two objects", `{}{}`, CodeInvalidInput},
		{"array body", `[1]`, CodeInvalidInput},
		{"string body", `"x"`, CodeInvalidInput},
		{"empty body", ``, CodeInvalidInput},
		{"bad escape", `{"A":"\x"}`, CodeInvalidInput},
		{"raw control char", "{\"A\":\"a\x01\"}", CodeInvalidInput},
		{"invalid utf8", "{\"A\":\"\xff\"}", CodeInvalidInput},
		{"leading zero", `{"A":01}`, CodeInvalidInput},
		{"bare dot", `{"A":1.}`, CodeInvalidInput},
		{"double overflow", `{"A":1e400}`, CodeInvalidInput},
		{"annotated double overflow", `{"A@odata.type":"Edm.Double","A":"13e7705"}`, CodeInvalidInput},
		{"int32 out of range", `{"A@odata.type":"Edm.Int32","A":2147483648}`, CodeInvalidInput},
		{"int32 fraction", `{"A@odata.type":"Edm.Int32","A":1.5}`, CodeInvalidInput},
		{"int64 out of range", `{"A@odata.type":"Edm.Int64","A":"9223372036854775808"}`, CodeInvalidInput},
		{"int64 garbage", `{"A@odata.type":"Edm.Int64","A":"12x"}`, CodeInvalidInput},
		{"double garbage", `{"A@odata.type":"Edm.Double","A":"inf"}`, CodeInvalidInput},
		{"double hex", `{"A@odata.type":"Edm.Double","A":"0x10"}`, CodeInvalidInput},
		{"bool garbage", `{"A@odata.type":"Edm.Boolean","A":1}`, CodeInvalidInput},
		{"datetime garbage", `{"A@odata.type":"Edm.DateTime","A":"yesterday"}`, CodeInvalidInput},
		{"datetime 8 digits", `{"A@odata.type":"Edm.DateTime","A":"2024-01-02T03:04:05.12345678Z"}`, CodeInvalidInput},
		{"datetime too early", `{"A@odata.type":"Edm.DateTime","A":"1600-12-31T23:59:59Z"}`, CodeOutOfRangeInput},
		{"datetime year 1", `{"A@odata.type":"Edm.DateTime","A":"0001-01-01T00:00:00Z"}`, CodeOutOfRangeInput},
		{"guid garbage", `{"A@odata.type":"Edm.Guid","A":"abc"}`, CodeInvalidInput},
		{"binary garbage", `{"A@odata.type":"Edm.Binary","A":"@@@"}`, CodeInvalidInput},
		{"string as number", `{"A@odata.type":"Edm.String","A":1}`, CodeInvalidInput},
		{"annotation not a string", `{"A@odata.type":1,"A":1}`, CodeInvalidInput},
		{"unknown type", `{"A@odata.type":"Edm.Decimal","A":"1"}`, CodeInvalidValueType},
		{"object value", `{"A":{"x":1}}`, CodeInvalidValueType},
		{"array value", `{"A":[1]}`, CodeInvalidValueType},
		{"duplicate property", `{"A":1,"A":2}`, CodeDuplicatePropertiesSpecified},
		{"duplicate null property", `{"A":null,"A":2}`, CodeDuplicatePropertiesSpecified},
		{"duplicate annotation", `{"A@odata.type":"Edm.Int64","A@odata.type":"Edm.Int64","A":"1"}`, CodeDuplicatePropertiesSpecified},
		{"duplicate key", `{"PartitionKey":"a","PartitionKey":"b"}`, CodeDuplicatePropertiesSpecified},
		{"null partition key", `{"PartitionKey":null,"RowKey":"r"}`, CodePropertiesNeedValue},
		{"null row key", `{"PartitionKey":"p","RowKey":null}`, CodePropertiesNeedValue},
		{"numeric key", `{"PartitionKey":1}`, CodeInvalidInput},
		{"key typed int", `{"RowKey@odata.type":"Edm.Int32","RowKey":"1"}`, CodeInvalidInput},
		{"key with slash", `{"PartitionKey":"a/b"}`, CodeOutOfRangeInput},
		{"key with backslash", `{"RowKey":"a\\b"}`, CodeOutOfRangeInput},
		{"key with hash", `{"RowKey":"a#b"}`, CodeOutOfRangeInput},
		{"key with question mark", `{"RowKey":"a?b"}`, CodeOutOfRangeInput},
		{"key with control char", `{"RowKey":"a\u0001b"}`, CodeOutOfRangeInput},
		{"key with C1 control", `{"RowKey":"a\u0085b"}`, CodeOutOfRangeInput},
		{"key too long", `{"RowKey":"` + long(1025) + `"}`, CodeKeyValueTooLarge},
		{"name with dash", `{"my-prop":1}`, CodePropertyNameInvalid},
		{"name with digit first", `{"1abc":1}`, CodePropertyNameInvalid},
		{"name with space", `{"a b":1}`, CodePropertyNameInvalid},
		{"name with dot", `{"a.b":1}`, CodePropertyNameInvalid},
		{"empty name", `{"":1}`, CodePropertyNameInvalid},
		{"name too long", `{"` + long(256) + `":1}`, CodePropertyNameTooLong},
		{"string too long", bigString(32769), CodePropertyValueTooLarge},
		{"string too long in UTF-16", `{"S":"` + strings.Repeat("😀", 16385) + `"}`, CodePropertyValueTooLarge},
		{"binary too long", `{"B@odata.type":"Edm.Binary","B":"` + strings.Repeat("AAAA", 21846) + `"}`, CodePropertyValueTooLarge},
		{"too many properties", props(253), CodeTooManyProperties},
		{"entity too large", func() string {
			var b strings.Builder
			b.WriteString("{")
			for i := range 17 {
				if i > 0 {
					b.WriteString(",")
				}
				b.WriteString(`"S` + itoa(i) + `":"` + long(32000) + `"`)
			}
			return b.String() + "}"
		}(), CodeEntityTooLarge},
	} {
		_, err := DecodeEntityJSON([]byte(tc.body))
		if got := ErrorCode(err); got != tc.code {
			t.Errorf("%s: got %v, want code %s", tc.name, err, tc.code)
		}
	}
}

func TestDecodeLimitsAccepted(t *testing.T) {
	long := strings.Repeat("a", 255)
	for _, body := range []string{
		`{"` + long + `":1}`,
		`{"S":"` + strings.Repeat("a", 32768) + `"}`,
		`{"S":"` + strings.Repeat("😀", 16384) + `"}`,
		`{"B@odata.type":"Edm.Binary","B":"` + strings.Repeat("AAAA", 21845) + `AA=="}`, // 65536 bytes
		`{"RowKey":"` + strings.Repeat("k", 1024) + `"}`,
		`{"_x":1,"é":2,"A1":3,"a_b_c":4}`,
	} {
		if _, err := DecodeEntityJSON([]byte(body)); err != nil {
			t.Errorf("%.60s…: %v", body, err)
		}
	}
	var b strings.Builder
	b.WriteString(`{"PartitionKey":"p","RowKey":"r"`)
	for i := range 252 {
		b.WriteString(`,"P` + itoa(i) + `":1,"N` + itoa(i) + `":null`)
	}
	b.WriteString("}")
	d, err := DecodeEntityJSON([]byte(b.String()))
	if err != nil || len(d.Properties) != 252 {
		t.Errorf("252 properties (and nulls that are not stored): %v, %d", err, len(d.Properties))
	}
}

func TestDecodeTableJSON(t *testing.T) {
	name, err := DecodeTableJSON([]byte(`{"odata.type":"x","TableName":"mytable"}`))
	if err != nil || name != "mytable" {
		t.Errorf("got %q, %v", name, err)
	}
	for body, code := range map[string]string{
		`{}`:                                CodePropertiesNeedValue,
		`{"TableName":null}`:                CodePropertiesNeedValue,
		`{"TableName":1}`:                   CodeInvalidInput,
		`[]`:                                CodeInvalidInput,
		`{"TableName":"a","TableName":"b"}`: CodeDuplicatePropertiesSpecified,
	} {
		if _, err := DecodeTableJSON([]byte(body)); ErrorCode(err) != code {
			t.Errorf("%s: %v, want %s", body, err, code)
		}
	}
}

func TestValidateKey(t *testing.T) {
	for _, ok := range []string{"", "abc", "a b", "ü", strings.Repeat("x", 1024), "a\u00a0b"} {
		if err := ValidateKey(PartitionKeyName, ok); err != nil {
			t.Errorf("ValidateKey(%q): %v", ok, err)
		}
	}
	for bad, code := range map[string]string{
		"a/b": CodeOutOfRangeInput, "\\": CodeOutOfRangeInput, "#": CodeOutOfRangeInput, "?": CodeOutOfRangeInput,
		"\x00": CodeOutOfRangeInput, "\x1f": CodeOutOfRangeInput, "\x7f": CodeOutOfRangeInput, "\u009f": CodeOutOfRangeInput,
		strings.Repeat("x", 1025): CodeKeyValueTooLarge,
	} {
		if err := ValidateKey(RowKeyName, bad); ErrorCode(err) != code {
			t.Errorf("ValidateKey(%q) = %v, want %s", bad, err, code)
		}
	}
}
