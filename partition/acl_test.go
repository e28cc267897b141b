package partition

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestTableACL(t *testing.T) {
	e := newEnv(t, nil)
	e.createTable("acl")
	s := e.s
	ctx := context.Background()
	ids, err := s.GetTableACL(ctx, acct, "acl")
	if err != nil || len(ids) != 0 {
		t.Fatalf("fresh table: %v %v", ids, err)
	}
	start := time.Date(2024, 1, 2, 3, 4, 5, 600, time.UTC)
	want := []SignedIdentifier{
		{ID: "read-only", Start: start, Expiry: start.Add(time.Hour), Permission: "r"},
		{ID: strings.Repeat("x", 64), Permission: "raud"},
		{ID: "no-times"},
	}
	if err := s.SetTableACL(ctx, acct, "ACL", want); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	s = e.s
	got, err := s.GetTableACL(ctx, acct, "acl")
	if err != nil || !slices.EqualFunc(got, want, func(a, b SignedIdentifier) bool {
		return a.ID == b.ID && a.Start.Equal(b.Start) && a.Expiry.Equal(b.Expiry) && a.Permission == b.Permission
	}) {
		t.Fatalf("got %+v %v", got, err)
	}
	six := make([]SignedIdentifier, 6)
	for i := range six {
		six[i].ID = string(rune('a' + i))
	}
	for _, c := range []struct {
		name string
		ids  []SignedIdentifier
		code string
	}{
		{"five", six[:5], ""},
		{"six", six, CodeInvalidXMLDocument},
		{"ID of 65", []SignedIdentifier{{ID: strings.Repeat("x", 65)}}, CodeInvalidXMLDocument},
		{"empty ID", []SignedIdentifier{{ID: ""}}, CodeInvalidXMLDocument},
		{"duplicate ID", []SignedIdentifier{{ID: "a"}, {ID: "a"}}, CodeInvalidXMLDocument},
		{"clear", nil, ""},
	} {
		wantCode(t, c.name, s.SetTableACL(ctx, acct, "acl", c.ids), c.code)
	}
	if got, _ := s.GetTableACL(ctx, acct, "acl"); len(got) != 0 {
		t.Fatalf("cleared ACL: %v", got)
	}
	_, err = s.GetTableACL(ctx, acct, "nothere")
	wantCode(t, "get on missing table", err, CodeTableNotFound)
	wantCode(t, "set on missing table", s.SetTableACL(ctx, acct, "nothere", nil), CodeTableNotFound)
}

func TestServiceProperties(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if p, err := e.s.GetServiceProperties(ctx, acct); err != nil || p != nil {
		t.Fatalf("never set: %q %v", p, err)
	}
	xml := []byte("<StorageServiceProperties><Cors/></StorageServiceProperties>")
	if err := e.s.SetServiceProperties(ctx, acct, xml); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	if p, err := e.s.GetServiceProperties(ctx, acct); err != nil || string(p) != string(xml) {
		t.Fatalf("got %q %v", p, err)
	}
	if p, _ := e.s.GetServiceProperties(ctx, "other"); p != nil {
		t.Fatalf("other account: %q", p)
	}
}

func TestContinuationTokenRoundTrip(t *testing.T) {
	for _, c := range [][2]string{{"", ""}, {"p", ""}, {"", "r"}, {"pk with spaces", "rk'quote"}, {strings.Repeat("é", 1024), "x"}} {
		tok := NewContinuation(c[0], c[1])
		if tok.IsZero() {
			t.Fatalf("%q: zero token", c)
		}
		pk, rk, err := tok.Position()
		if err != nil || pk != c[0] || rk != c[1] {
			t.Fatalf("%q: decoded (%q, %q) %v", c, pk, rk, err)
		}
		for _, r := range tok.NextPartitionKey + tok.NextRowKey {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				t.Fatalf("token %q has a character %q that needs escaping", tok, r)
			}
		}
		name, err := DecodeNextTableName(EncodeNextTableName(c[0]))
		if err != nil || name != c[0] {
			t.Fatalf("table token %q: %q %v", c[0], name, err)
		}
	}
	if _, _, err := (Continuation{}).Position(); err == nil {
		t.Fatal("zero continuation decoded")
	}
}
