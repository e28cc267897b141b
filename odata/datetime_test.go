package odata

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestParseDateTime(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // AppendFixed form; "" means a parse failure
	}{
		{"2024-01-02T03:04:05Z", "2024-01-02T03:04:05.0000000Z"},
		{"2024-01-02T03:04:05.1234567Z", "2024-01-02T03:04:05.1234567Z"},
		{"2024-01-02T03:04:05.1Z", "2024-01-02T03:04:05.1000000Z"},
		{"2024-01-02T03:04:05", "2024-01-02T03:04:05.0000000Z"}, // timezone-less is UTC
		{"2024-01-02T03:04", "2024-01-02T03:04:00.0000000Z"},
		{"2024-01-02T03:04:05+02:00", "2024-01-02T01:04:05.0000000Z"},
		{"2024-01-02T00:30:00-01:00", "2024-01-02T01:30:00.0000000Z"},
		{"2024-01-01T00:30:00+01:00", "2023-12-31T23:30:00.0000000Z"},
		{"2024-02-29T00:00:00Z", "2024-02-29T00:00:00.0000000Z"},
		{"1601-01-01T00:00:00Z", "1601-01-01T00:00:00.0000000Z"},
		{"9999-12-31T23:59:59.9999999Z", "9999-12-31T23:59:59.9999999Z"},
		{"2023-02-29T00:00:00Z", ""},
		{"2024-01-02T03:04:05.12345678Z", ""}, // more than 7 digits
		{"2024-01-02T03:04:05.Z", ""},
		{"2024-01-02 03:04:05Z", ""},
		{"2024-13-02T03:04:05Z", ""},
		{"2024-01-02T24:00:00Z", ""},
		{"2024-01-02T03:04:05+0200", ""},
		{"2024-01-02T03:04:05ZZ", ""},
		{"", ""},
		{"not a date", ""},
	} {
		d, ok := ParseDateTime(tc.in)
		if tc.want == "" {
			if ok {
				t.Errorf("ParseDateTime(%q) = %v, want failure", tc.in, d)
			}
			continue
		}
		if !ok {
			t.Errorf("ParseDateTime(%q) failed", tc.in)
			continue
		}
		if got := string(d.AppendFixed(nil)); got != tc.want {
			t.Errorf("ParseDateTime(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestDateTimeRange(t *testing.T) {
	for _, tc := range []struct {
		in    string
		valid bool
	}{
		{"1601-01-01T00:00:00Z", true},
		{"1600-12-31T23:59:59.9999999Z", false},
		{"9999-12-31T23:59:59.9999999Z", true},
		{"0001-01-01T00:00:00Z", false},
	} {
		d, ok := ParseDateTime(tc.in)
		if !ok || d.Valid() != tc.valid {
			t.Errorf("%s: parsed %v, valid %v; want valid %v", tc.in, ok, d.Valid(), tc.valid)
		}
	}
	if got := MinDateTime.String(); got != "1601-01-01T00:00:00Z" {
		t.Errorf("MinDateTime = %s", got)
	}
	if got := MaxDateTime.String(); got != "9999-12-31T23:59:59.9999999Z" {
		t.Errorf("MaxDateTime = %s", got)
	}
}

func TestDateTimeText(t *testing.T) {
	for _, tc := range []struct{ in, text string }{
		{"2024-01-02T03:04:05Z", "2024-01-02T03:04:05Z"},
		{"2024-01-02T03:04:05.1200000Z", "2024-01-02T03:04:05.12Z"},
		{"2024-01-02T03:04:05.0000001Z", "2024-01-02T03:04:05.0000001Z"},
	} {
		d, _ := ParseDateTime(tc.in)
		if got := d.String(); got != tc.text {
			t.Errorf("%s: String = %s, want %s", tc.in, got, tc.text)
		}
	}
}

// TestDateTimeMatchesTime checks the calendar arithmetic against package time
// over the whole supported range.
func TestDateTimeMatchesTime(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		d := MinDateTime + DateTime(rng.Int64N(int64(MaxDateTime-MinDateTime)))
		tm := d.Time()
		if back := DateTimeFromTime(tm); back != d {
			t.Fatalf("round trip of %d through time.Time gave %d", d, back)
		}
		want := tm.Format("2006-01-02T15:04:05.0000000Z")
		if got := string(d.AppendFixed(nil)); got != want {
			t.Fatalf("ticks %d: %s, time package says %s", d, got, want)
		}
		if p, ok := ParseDateTime(want); !ok || p != d {
			t.Fatalf("ParseDateTime(%s) = %d, %v; want %d", want, p, ok, d)
		}
	}
	if got := DateTimeFromTime(time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)); got != unixEpochTicks {
		t.Errorf("Unix epoch = %d ticks, want %d", got, DateTime(unixEpochTicks))
	}
}

func TestETag(t *testing.T) {
	d, _ := ParseDateTime("2021-04-06T21:03:31.9231271Z")
	if got, want := ETag(d), `W/"datetime'2021-04-06T21%3A03%3A31.9231271Z'"`; got != want {
		t.Errorf("ETag = %s, want %s", got, want)
	}
	d, _ = ParseDateTime("2021-04-06T21:03:31Z")
	if got, want := ETag(d), `W/"datetime'2021-04-06T21%3A03%3A31.0000000Z'"`; got != want {
		t.Errorf("ETag = %s, want %s", got, want)
	}
}
