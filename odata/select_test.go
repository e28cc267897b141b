package odata

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseSelect(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string // nil: everything
	}{
		{"", nil},
		{"  ", nil},
		{"*", nil},
		{"A", []string{"A"}},
		{"A,B", []string{"A", "B"}},
		{" A , B ,A", []string{"A", "B"}},
		{"RowKey,A,PartitionKey,Timestamp", []string{"PartitionKey", "RowKey", "Timestamp", "A"}},
		{"é_1", []string{"é_1"}},
	} {
		sel, err := ParseSelect(tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if got := sel.Names(); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: %v, want %v", tc.in, got, tc.want)
		}
	}
	for _, bad := range []string{"A,", ",A", "A,,B", "a-b", "1a", "A B", "A/B", strings.Repeat("x", 256)} {
		if _, err := ParseSelect(bad); ErrorCode(err) != CodeInvalidInput {
			t.Errorf("ParseSelect(%q) = %v, want InvalidInput", bad, err)
		}
	}
	names := make([]string, 256)
	for i := range names {
		names[i] = "P" + itoa(i)
	}
	if _, err := ParseSelect(strings.Join(names, ",")); ErrorCode(err) != CodeInvalidInput {
		t.Errorf("256 names: %v", err)
	}
	if _, err := ParseSelect(strings.Join(names[:255], ",")); err != nil {
		t.Errorf("255 names: %v", err)
	}
}

func TestParseTop(t *testing.T) {
	for in, want := range map[string]int{"0": 0, "1": 1, "1000": 1000, "0010": 10, "999": 999} {
		if got, err := ParseTop(in); err != nil || got != want {
			t.Errorf("ParseTop(%q) = %d, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "1001", "-1", "+1", " 1", "1 ", "abc", "1.0", "99999999999", "1e3"} {
		if _, err := ParseTop(bad); ErrorCode(err) != CodeInvalidInput {
			t.Errorf("ParseTop(%q) = %v, want InvalidInput", bad, err)
		}
	}
}

func TestMetadataNames(t *testing.T) {
	for _, m := range []Metadata{NoMetadata, MinimalMetadata, FullMetadata} {
		if got, ok := ParseMetadata(strings.ToUpper(m.String())); !ok || got != m {
			t.Errorf("%v: %v %v", m, got, ok)
		}
	}
	if _, ok := ParseMetadata("verbose"); ok {
		t.Error("verbose accepted")
	}
	for typ := TypeString; typ <= TypeBinary; typ++ {
		if got, ok := ParseTypeName(typ.String()); !ok || got != typ {
			t.Errorf("%v round trip", typ)
		}
	}
	if Type(0).Valid() || Type(9).Valid() {
		t.Error("invalid types are valid")
	}
}

func TestErrorHelpers(t *testing.T) {
	_, err := ParseFilter("A eq")
	if !IsCode(err, CodeInvalidInput) || !strings.Contains(err.Error(), "offset 4") {
		t.Errorf("%v", err)
	}
	err = ValidateKey(PartitionKeyName, "a/b")
	if !strings.HasPrefix(err.Error(), "OutOfRangeInput: The 'PartitionKey' parameter of value 'a/b' is out of range.") {
		t.Errorf("%v", err)
	}
	if ErrorCode(nil) != "" || IsCode(nil, CodeInvalidInput) {
		t.Error("nil error has a code")
	}
}

func TestValidateEntity(t *testing.T) {
	ok := &Entity{PartitionKey: "p", RowKey: "r", Properties: []Property{{"A", Int32Value(1)}}}
	if err := ValidateEntity(ok); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		e    *Entity
		code string
	}{
		{&Entity{PartitionKey: "a/b"}, CodeOutOfRangeInput},
		{&Entity{RowKey: strings.Repeat("x", 1025)}, CodeKeyValueTooLarge},
		{&Entity{Properties: []Property{{"A", Int32Value(1)}, {"A", Int32Value(2)}}}, CodeDuplicatePropertiesSpecified},
		{&Entity{Properties: []Property{{"RowKey", StringValue("x")}}}, CodePropertyNameInvalid},
		{&Entity{Properties: []Property{{"A", Value{}}}}, CodeInvalidValueType},
		{&Entity{Properties: []Property{{"A", DateTimeValue(0)}}}, CodeOutOfRangeInput},
		{&Entity{Properties: make([]Property, 253)}, CodeTooManyProperties},
		{&Entity{Properties: func() []Property {
			ps := make([]Property, 20)
			for i := range ps {
				ps[i] = Property{"P" + itoa(i), BinaryValue(make([]byte, 60000))}
			}
			return ps
		}()}, CodeEntityTooLarge},
	} {
		if err := ValidateEntity(tc.e); ErrorCode(err) != tc.code {
			t.Errorf("%.80v: %v, want %s", tc.e, err, tc.code)
		}
	}
	// The documented size formula.
	e := &Entity{PartitionKey: "ab", RowKey: "c", Properties: []Property{{"S", StringValue("xyz")}, {"I", Int32Value(1)}}}
	want := 4 + 2*3 + (8 + 2*9 + 8) + (8 + 2 + 2*3 + 4) + (8 + 2 + 4)
	if got := EntitySize(e); got != want {
		t.Errorf("EntitySize = %d, want %d", got, want)
	}
}
