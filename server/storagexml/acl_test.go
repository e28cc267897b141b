package storagexml

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseSignedIdentifiers(t *testing.T) {
	// aztables' Set Access Policy body (recorded): no declaration, fields in
	// its own order.
	got, err := ParseSignedIdentifiers([]byte(`<SignedIdentifiers><SignedIdentifier><AccessPolicy><Permission>r</Permission><Expiry>2024-01-01T00:00:00Z</Expiry><Start>2020-01-01T00:00:00Z</Start></AccessPolicy><Id>1</Id></SignedIdentifier></SignedIdentifiers>`))
	if err != nil {
		t.Fatal(err)
	}
	want := []SignedIdentifier{{ID: "1", AccessPolicy: AccessPolicy{
		Start: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), Expiry: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), Permission: "r"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v", got)
	}
	for _, body := range []string{"", "  \r\n", "\ufeff"} {
		ids, err := ParseSignedIdentifiers([]byte(body))
		if err != nil || ids != nil {
			t.Fatalf("empty body %q: %v %v", body, ids, err)
		}
	}
	ids, err := ParseSignedIdentifiers([]byte(`<?xml version="1.0" encoding="utf-8"?><SignedIdentifiers><SignedIdentifier><Id>only-id</Id></SignedIdentifier><SignedIdentifier><Id>p</Id><AccessPolicy><Start>2013-11-26</Start><Expiry>2013-11-27T08:49Z</Expiry><Permission>raud</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>`))
	if err != nil || len(ids) != 2 || !ids[0].AccessPolicy.Start.IsZero() || ids[1].AccessPolicy.Expiry.Minute() != 49 {
		t.Fatalf("%+v %v", ids, err)
	}
}

func TestMarshalSignedIdentifiersGolden(t *testing.T) {
	ids := []SignedIdentifier{{ID: "MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTI=", AccessPolicy: AccessPolicy{
		Start: time.Date(2013, 11, 26, 8, 49, 37, 0, time.UTC), Expiry: time.Date(2013, 11, 27, 8, 49, 37, 0, time.UTC), Permission: "raud"}}}
	want := `<?xml version="1.0" encoding="utf-8"?><SignedIdentifiers><SignedIdentifier><Id>MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTI=</Id><AccessPolicy><Start>2013-11-26T08:49:37.0000000Z</Start><Expiry>2013-11-27T08:49:37.0000000Z</Expiry><Permission>raud</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>`
	if got := string(MarshalSignedIdentifiers(ids)); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if got := string(MarshalSignedIdentifiers(nil)); got != `<?xml version="1.0" encoding="utf-8"?><SignedIdentifiers />` {
		t.Fatal(got)
	}
	if got := string(MarshalSignedIdentifiers([]SignedIdentifier{{ID: "a<b"}})); !strings.Contains(got, "<Id>a&lt;b</Id><AccessPolicy />") {
		t.Fatal(got)
	}
}

func TestSignedIdentifiersRoundTrip(t *testing.T) {
	ids := []SignedIdentifier{
		{ID: "a", AccessPolicy: AccessPolicy{Expiry: time.Date(2030, 1, 2, 3, 4, 5, 123456700, time.UTC)}},
		{ID: "b", AccessPolicy: AccessPolicy{Permission: "ad"}},
		{ID: "c"},
		{ID: strings.Repeat("x", 64), AccessPolicy: AccessPolicy{Start: time.Date(2020, 5, 6, 7, 8, 9, 0, time.UTC), Permission: "u"}},
		{ID: "e & f"},
	}
	got, err := ParseSignedIdentifiers(MarshalSignedIdentifiers(ids))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, ids) {
		t.Fatalf("got %+v\nwant %+v", got, ids)
	}
}

func TestParseSignedIdentifiersErrors(t *testing.T) {
	one := func(inner string) string {
		return "<SignedIdentifiers><SignedIdentifier>" + inner + "</SignedIdentifier></SignedIdentifiers>"
	}
	six := "<SignedIdentifiers>" + strings.Repeat("<SignedIdentifier><Id>x</Id></SignedIdentifier>", 1)
	for i := 2; i <= 6; i++ {
		six += "<SignedIdentifier><Id>x" + strings.Repeat("y", i) + "</Id></SignedIdentifier>"
	}
	six += "</SignedIdentifiers>"
	for _, c := range []struct{ name, doc string }{
		{"not xml", "{}"},
		{"wrong root", "<SignedIdentifier/>"},
		{"six identifiers", six},
		{"id missing", one("<AccessPolicy><Permission>r</Permission></AccessPolicy>")},
		{"id empty", one("<Id> </Id>")},
		{"id too long", one("<Id>" + strings.Repeat("x", 65) + "</Id>")},
		{"duplicate id", "<SignedIdentifiers><SignedIdentifier><Id>a</Id></SignedIdentifier><SignedIdentifier><Id>a</Id></SignedIdentifier></SignedIdentifiers>"},
		{"bad start", one("<Id>a</Id><AccessPolicy><Start>yesterday</Start></AccessPolicy>")},
		{"bad expiry", one("<Id>a</Id><AccessPolicy><Expiry>2024-13-01</Expiry></AccessPolicy>")},
		{"bad permission", one("<Id>a</Id><AccessPolicy><Permission>rw</Permission></AccessPolicy>")},
		{"repeated permission", one("<Id>a</Id><AccessPolicy><Permission>rr</Permission></AccessPolicy>")},
		{"trailing content", "<SignedIdentifiers/><more/>"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseSignedIdentifiers([]byte(c.doc))
			var e *Error
			if !errors.As(err, &e) || e.Status != 400 || e.Code != CodeInvalidXMLDocument {
				t.Fatalf("got %v, want 400 InvalidXmlDocument", err)
			}
		})
	}
}

func TestMarshalServiceStats(t *testing.T) {
	// The body of a recorded Get Table Service Stats response (minus BOM).
	want := `<?xml version="1.0" encoding="utf-8"?><StorageServiceStats><GeoReplication><Status>live</Status><LastSyncTime>Wed, 08 Sep 2021 16:46:37 GMT</LastSyncTime></GeoReplication></StorageServiceStats>`
	got := string(MarshalServiceStats(GeoReplication{Status: GeoLive, LastSyncTime: time.Date(2021, 9, 8, 18, 46, 37, 0, time.FixedZone("CEST", 7200))}))
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if got := string(MarshalServiceStats(GeoReplication{Status: GeoBootstrap})); !strings.Contains(got, "<Status>bootstrap</Status><LastSyncTime />") {
		t.Fatal(got)
	}
}
