package odata

import (
	"math"
	"testing"
)

func TestGuid(t *testing.T) {
	g, ok := ParseGuid("C9DA6455-213D-42C9-9A79-3E9149A57833")
	if !ok {
		t.Fatal("parse failed")
	}
	if got := g.String(); got != "c9da6455-213d-42c9-9a79-3e9149a57833" {
		t.Errorf("String = %s", got)
	}
	for _, bad := range []string{"", "c9da6455213d42c99a793e9149a57833", "{c9da6455-213d-42c9-9a79-3e9149a57833}",
		"c9da6455-213d-42c9-9a79-3e9149a5783g", "c9da6455-213d-42c9-9a79_3e9149a57833"} {
		if _, ok := ParseGuid(bad); ok {
			t.Errorf("ParseGuid(%q) succeeded", bad)
		}
	}
	// Byte order is text order, so comparing bytes orders GUIDs as text.
	a, _ := ParseGuid("00000001-0000-0000-0000-000000000000")
	b, _ := ParseGuid("00000000-ffff-0000-0000-000000000000")
	if !Compare(GuidValue(a), OpGt, GuidValue(b)) {
		t.Error("GUID order does not follow the text")
	}
}

func TestAppendDouble(t *testing.T) {
	for _, tc := range []struct {
		f    float64
		want string
	}{
		{1, "1.0"},
		{0, "0.0"},
		{math.Copysign(0, -1), "-0.0"},
		{-2.5, "-2.5"},
		{0.1, "0.1"},
		{123456789, "123456789.0"},
		{1e20, "100000000000000000000.0"},
		{1e21, "1e+21"},
		{1.5e-7, "1.5e-7"},
		{math.MaxFloat64, "1.7976931348623157e+308"},
		{math.SmallestNonzeroFloat64, "5e-324"},
		{6824053932181, "6824053932181.0"},
	} {
		if got := string(appendDouble(nil, tc.f)); got != tc.want {
			t.Errorf("appendDouble(%v) = %s, want %s", tc.f, got, tc.want)
		}
	}
}

func TestValueString(t *testing.T) {
	g, _ := ParseGuid("c9da6455-213d-42c9-9a79-3e9149a57833")
	d, _ := ParseDateTime("2024-01-02T03:04:05Z")
	for _, tc := range []struct {
		v    Value
		want string
	}{
		{StringValue("it's"), "'it''s'"},
		{Int32Value(-5), "-5"},
		{Int64Value(math.MinInt64), "-9223372036854775808L"},
		{DoubleValue(2), "2.0"},
		{DoubleValue(math.NaN()), "NaN"},
		{DoubleValue(math.Inf(-1)), "-INF"},
		{BoolValue(true), "true"},
		{DateTimeValue(d), "datetime'2024-01-02T03:04:05Z'"},
		{GuidValue(g), "guid'c9da6455-213d-42c9-9a79-3e9149a57833'"},
		{BinaryValue([]byte{0xab, 1}), "X'ab01'"},
	} {
		if got := tc.v.String(); got != tc.want {
			t.Errorf("String = %s, want %s", got, tc.want)
		}
	}
}
