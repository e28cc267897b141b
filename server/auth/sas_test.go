package auth

import (
	"context"
	"crypto/tls"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/odata"
)

// sasQuery builds a query string from key/value pairs plus the signature.
func sasQuery(sig string, kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			v.Set(kv[i], kv[i+1])
		}
	}
	v.Set("sig", sig)
	return v.Encode()
}

const (
	sasStart  = "2024-03-26T00:00:00Z"
	sasExpiry = "2024-03-27T00:00:00Z"
)

// serviceSAS signs a table SAS for version 2019-02-02 the way
// create-service-sas spells the string to sign, written out here.
func serviceSAS(t *testing.T, key string, f map[string]string) string {
	t.Helper()
	get := func(k string) string { return f[k] }
	sts := get("sp") + "\n" + get("st") + "\n" + get("se") + "\n" +
		"/table/devstoreaccount1/" + strings.ToLower(get("tn")) + "\n" +
		get("si") + "\n" + get("sip") + "\n" + get("spr") + "\n" + get("sv") + "\n" +
		get("spk") + "\n" + get("srk") + "\n" + get("epk") + "\n" + get("erk")
	kv := []string{}
	for _, k := range []string{"sv", "tn", "sp", "st", "se", "sip", "spr", "si", "spk", "srk", "epk", "erk"} {
		kv = append(kv, k, f[k])
	}
	return sasQuery(mac(t, key, sts), kv...)
}

func baseFields() map[string]string {
	return map[string]string{"sv": "2019-02-02", "tn": "MyTable", "sp": "raud", "st": sasStart, "se": sasExpiry}
}

func with(f map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range f {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func authSAS(t *testing.T, target string, lookup PolicyLookup) (*Principal, error) {
	t.Helper()
	return testAccounts(t).Authenticate(context.Background(), newReq("GET", target, nil), Address{Account: DevAccountName}, refTime, lookup)
}

func TestServiceSASKnownAnswer(t *testing.T) {
	// The string to sign written out in full for one token.
	sts := "raud\n2024-03-26T00:00:00Z\n2024-03-27T00:00:00Z\n/table/devstoreaccount1/mytable\n\n192.0.2.0-192.0.2.255\nhttps,http\n2019-02-02\np1\n\np9\nr9"
	q := "sv=2019-02-02&tn=MyTable&sp=raud&st=2024-03-26T00%3A00%3A00Z&se=2024-03-27T00%3A00%3A00Z&sip=192.0.2.0-192.0.2.255&spr=https%2Chttp&spk=p1&epk=p9&erk=r9&sig=" + url.QueryEscape(mac(t, devKey, sts))
	p, err := authSAS(t, "/devstoreaccount1/MyTable()?"+q, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != KindServiceSAS || p.Table() != "mytable" || !p.IsSAS() || p.Version != "2019-02-02" {
		t.Fatalf("principal %v", p)
	}
	kr, limited := p.KeyRange()
	want := odata.KeyRange{
		Start: odata.Position{Kind: odata.BeforeKey, PartitionKey: "p1"},
		End:   odata.Position{Kind: odata.AfterKey, PartitionKey: "p9", RowKey: "r9"},
	}
	if !limited || kr != want {
		t.Fatalf("key range %v, want %v", kr, want)
	}
	if !strings.Contains(p.String(), "ServiceSAS(devstoreaccount1, table=mytable, sp=adru") {
		t.Fatalf("String %q", p.String())
	}
}

func TestServiceSASVersions(t *testing.T) {
	// Before 2015-04-05 there is no sip/spr line; before 2015-02-21 the
	// canonical resource lacks "/table".
	for _, c := range []struct{ sv, sts string }{
		{"2013-08-15", "r\n\n2024-03-27T00:00:00Z\n/devstoreaccount1/mytable\n\n2013-08-15\n\n\n\n"},
		{"2015-02-21", "r\n\n2024-03-27T00:00:00Z\n/table/devstoreaccount1/mytable\n\n2015-02-21\n\n\n\n"},
		{"2015-04-05", "r\n\n2024-03-27T00:00:00Z\n/table/devstoreaccount1/mytable\n\n\n\n2015-04-05\n\n\n\n"},
		{"2021-06-08", "r\n\n2024-03-27T00:00:00Z\n/table/devstoreaccount1/mytable\n\n\n\n2021-06-08\n\n\n\n"},
	} {
		q := sasQuery(mac(t, devKey, c.sts), "sv", c.sv, "tn", "mytable", "sp", "r", "se", sasExpiry)
		if _, err := authSAS(t, "/devstoreaccount1/mytable?"+q, nil); err != nil {
			t.Errorf("sv=%s: %v", c.sv, err)
		}
	}
	q := sasQuery(mac(t, devKey, "r\n\n2024-03-27T00:00:00Z\n/devstoreaccount1/mytable\n\n2009-09-19"), "sv", "2009-09-19", "tn", "mytable", "sp", "r", "se", sasExpiry)
	_, err := authSAS(t, "/devstoreaccount1/mytable?"+q, nil)
	wantCode(t, err, 403, CodeAuthenticationFailed)
}

func TestServiceSASKey2AndPlusInSignature(t *testing.T) {
	if _, err := authSAS(t, "/devstoreaccount1/mytable?"+serviceSAS(t, devKey2, baseFields()), nil); err != nil {
		t.Fatal(err)
	}
	// A '+' sent unencoded arrives as a space; it must still verify.
	for i := 0; i < 40; i++ {
		f := with(baseFields(), "spk", strings.Repeat("k", i))
		q := serviceSAS(t, devKey, f)
		raw, _ := url.ParseQuery(q)
		sig := raw.Get("sig")
		if !strings.Contains(sig, "+") {
			continue
		}
		broken := strings.Replace(q, "sig="+url.QueryEscape(sig), "sig="+strings.ReplaceAll(url.QueryEscape(sig), "%2B", "+"), 1)
		if _, err := authSAS(t, "/devstoreaccount1/mytable?"+broken, nil); err != nil {
			t.Fatalf("unencoded '+': %v", err)
		}
		return
	}
	t.Skip("no signature with '+' found")
}

func TestServiceSASRefusals(t *testing.T) {
	for _, c := range []struct {
		name   string
		query  string
		status int
		code   string
	}{
		{"wrong key", serviceSAS(t, otherKey, baseFields()), 403, CodeAuthenticationFailed},
		{"expired", serviceSAS(t, devKey, with(baseFields(), "st", "2024-03-25T00:00:00Z", "se", "2024-03-26T08:00:00Z")), 403, CodeAuthenticationFailed},
		{"not yet valid", serviceSAS(t, devKey, with(baseFields(), "st", "2024-03-26T09:00:00Z")), 403, CodeAuthenticationFailed},
		{"expiry before start", serviceSAS(t, devKey, with(baseFields(), "st", "2024-03-28T00:00:00Z")), 403, CodeAuthenticationFailed},
		{"bad time", serviceSAS(t, devKey, with(baseFields(), "se", "tomorrow")), 403, CodeAuthenticationFailed},
		{"missing sp", serviceSAS(t, devKey, with(baseFields(), "sp", "")), 403, CodeAuthenticationFailed},
		{"missing se", serviceSAS(t, devKey, with(baseFields(), "se", "")), 403, CodeAuthenticationFailed},
		{"missing tn", serviceSAS(t, devKey, with(baseFields(), "tn", "")), 403, CodeAuthenticationFailed},
		{"missing sv", serviceSAS(t, devKey, with(baseFields(), "sv", "")), 403, CodeAuthenticationFailed},
		{"bad permission", serviceSAS(t, devKey, with(baseFields(), "sp", "rw")), 403, CodeAuthenticationFailed},
		{"repeated permission", serviceSAS(t, devKey, with(baseFields(), "sp", "rr")), 403, CodeAuthenticationFailed},
		{"srk without spk", serviceSAS(t, devKey, with(baseFields(), "srk", "a")), 403, CodeAuthenticationFailed},
		{"erk without epk", serviceSAS(t, devKey, with(baseFields(), "erk", "a")), 403, CodeAuthenticationFailed},
		{"ip outside", serviceSAS(t, devKey, with(baseFields(), "sip", "198.51.100.1")), 403, CodeAuthorizationSourceIPMismatch},
		{"ip range outside", serviceSAS(t, devKey, with(baseFields(), "sip", "192.0.2.11-192.0.2.20")), 403, CodeAuthorizationSourceIPMismatch},
		{"ip malformed", serviceSAS(t, devKey, with(baseFields(), "sip", "192.0.2.300")), 403, CodeAuthenticationFailed},
		{"ip range reversed", serviceSAS(t, devKey, with(baseFields(), "sip", "192.0.2.20-192.0.2.1")), 403, CodeAuthenticationFailed},
		{"https only over http", serviceSAS(t, devKey, with(baseFields(), "spr", "https")), 403, CodeAuthorizationProtocolMismatch},
		{"http only is not a value", serviceSAS(t, devKey, with(baseFields(), "spr", "http")), 403, CodeAuthenticationFailed},
		{"bad signature encoding", "sv=2019-02-02&tn=t&sp=r&se=2024-03-27T00%3A00%3A00Z&sig=%21%21", 403, CodeAuthenticationFailed},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := authSAS(t, "/devstoreaccount1/mytable?"+c.query, nil)
			wantCode(t, err, c.status, c.code)
		})
	}
	t.Run("tampered field", func(t *testing.T) {
		q := serviceSAS(t, devKey, baseFields())
		_, err := authSAS(t, "/devstoreaccount1/mytable?"+strings.Replace(q, "sp=raud", "sp=rau", 1), nil)
		wantCode(t, err, 403, CodeAuthenticationFailed)
	})
}

func TestServiceSASAccepts(t *testing.T) {
	for _, c := range []struct {
		name string
		f    map[string]string
		tls  bool
	}{
		{"ip inside range", with(baseFields(), "sip", "192.0.2.0-192.0.2.255"), false},
		{"single ip", with(baseFields(), "sip", "192.0.2.10"), false},
		{"https,http over http", with(baseFields(), "spr", "https,http"), false},
		{"https over https", with(baseFields(), "spr", "https"), true},
		{"no start", with(baseFields(), "st", ""), false},
		{"date-only expiry", with(baseFields(), "se", "2024-03-27"), false},
		{"fractional seconds", with(baseFields(), "se", "2024-03-27T00:00:00.0000000Z"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newReq("GET", "/devstoreaccount1/mytable?"+serviceSAS(t, devKey, c.f), nil)
			if c.tls {
				r.TLS = &tls.ConnectionState{}
			}
			if _, err := testAccounts(t).Authenticate(context.Background(), r, Address{Account: DevAccountName}, refTime, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestServiceSASCanDo(t *testing.T) {
	principal := func(sp string) *Principal {
		p, err := authSAS(t, "/devstoreaccount1/mytable?"+serviceSAS(t, devKey, with(baseFields(), "sp", sp)), nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		sp, table string
		op        Operation
		code      string // "" = allowed
	}{
		{"r", "mytable", OpQueryEntities, ""},
		{"r", "MYTABLE", OpGetEntity, ""},
		{"a", "mytable", OpQueryEntities, CodeAuthorizationPermissionMismatch},
		{"a", "mytable", OpInsertEntity, ""},
		{"r", "mytable", OpInsertEntity, CodeAuthorizationPermissionMismatch},
		{"u", "mytable", OpUpdateEntity, ""},
		{"u", "mytable", OpMergeEntity, ""},
		{"u", "mytable", OpInsertOrMergeEntity, CodeAuthorizationPermissionMismatch},
		{"a", "mytable", OpInsertOrReplaceEntity, CodeAuthorizationPermissionMismatch},
		{"au", "mytable", OpInsertOrReplaceEntity, ""},
		{"au", "mytable", OpInsertOrMergeEntity, ""},
		{"d", "mytable", OpDeleteEntity, ""},
		{"rau", "mytable", OpDeleteEntity, CodeAuthorizationPermissionMismatch},
		{"raud", "othertable", OpQueryEntities, CodeAuthorizationFailure},
		{"raud", "", OpBatch, ""},
		{"r", "mytable", OpBatch, ""},
		{"raud", "othertable", OpBatch, CodeAuthorizationFailure},
		{"raud", "mytable", OpGetTableACL, CodeAuthorizationFailure},
		{"raud", "mytable", OpSetTableACL, CodeAuthorizationFailure},
		{"raud", "", OpQueryTables, CodeAuthorizationResourceTypeMismatch},
		{"raud", "mytable", OpCreateTable, CodeAuthorizationResourceTypeMismatch},
		{"raud", "mytable", OpDeleteTable, CodeAuthorizationResourceTypeMismatch},
		{"raud", "", OpGetServiceProperties, CodeAuthorizationResourceTypeMismatch},
		{"raud", "", OpSetServiceProperties, CodeAuthorizationResourceTypeMismatch},
		{"raud", "", OpGetServiceStats, CodeAuthorizationResourceTypeMismatch},
		{"raud", "mytable", Operation(200), CodeAuthorizationFailure},
	} {
		err := principal(c.sp).CanDo(c.op, c.table)
		if c.code == "" {
			if err != nil {
				t.Errorf("sp=%s %v on %q: %v", c.sp, c.op, c.table, err)
			}
			continue
		}
		if ErrorCode(err) != c.code {
			t.Errorf("sp=%s %v on %q: got %v, want %s", c.sp, c.op, c.table, err, c.code)
		}
	}
}

func TestStoredAccessPolicy(t *testing.T) {
	policies := map[string]Policy{
		"full":     {Start: refTime.Add(-time.Hour), Expiry: refTime.Add(time.Hour), Permission: "r"},
		"expiry":   {Expiry: refTime.Add(time.Hour)},
		"perm":     {Permission: "ra"},
		"expired":  {Expiry: refTime.Add(-time.Hour), Permission: "r"},
		"notyet":   {Start: refTime.Add(time.Hour), Expiry: refTime.Add(2 * time.Hour), Permission: "r"},
		"badperms": {Expiry: refTime.Add(time.Hour), Permission: "rx"},
	}
	var gotTable string
	lookup := func(ctx context.Context, table, id string) (Policy, bool, error) {
		gotTable = table
		if id == "boom" {
			return Policy{}, false, errors.New("storage unavailable")
		}
		p, ok := policies[id]
		return p, ok, nil
	}
	sas := func(kv ...string) string {
		f := map[string]string{"sv": "2019-02-02", "tn": "MyTable"}
		return "/devstoreaccount1/mytable?" + serviceSAS(t, devKey, with(f, kv...))
	}
	// Fields coming from the policy.
	p, err := authSAS(t, sas("si", "full"), lookup)
	if err != nil {
		t.Fatal(err)
	}
	if gotTable != "MyTable" || p.CanDo(OpQueryEntities, "mytable") != nil || p.CanDo(OpInsertEntity, "mytable") == nil {
		t.Fatalf("policy fields not applied: table %q, %v", gotTable, p)
	}
	if _, err := authSAS(t, sas("si", "expiry", "sp", "r"), lookup); err != nil {
		t.Fatalf("expiry from policy, permission from SAS: %v", err)
	}
	if _, err := authSAS(t, sas("si", "perm", "se", sasExpiry), lookup); err != nil {
		t.Fatalf("permission from policy, expiry from SAS: %v", err)
	}
	for _, c := range []struct {
		name string
		url  string
	}{
		{"unknown identifier", sas("si", "nosuch", "sp", "r", "se", sasExpiry)},
		{"permission twice", sas("si", "full", "sp", "r")},
		{"expiry twice", sas("si", "expiry", "sp", "r", "se", sasExpiry)},
		{"start twice", sas("si", "full", "st", sasStart)},
		{"nothing gives the expiry", sas("si", "perm")},
		{"policy expired", sas("si", "expired")},
		{"policy not yet valid", sas("si", "notyet")},
		{"policy with bad permission", sas("si", "badperms")},
		{"identifier too long", sas("si", strings.Repeat("x", 65), "sp", "r", "se", sasExpiry)},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := authSAS(t, c.url, lookup)
			wantCode(t, err, 403, CodeAuthenticationFailed)
		})
	}
	if _, err := authSAS(t, sas("si", "boom", "sp", "r", "se", sasExpiry), lookup); err == nil || err.Error() != "storage unavailable" {
		t.Fatalf("lookup error not passed through: %v", err)
	}
	_, err = authSAS(t, sas("si", "full"), nil)
	wantCode(t, err, 403, CodeAuthenticationFailed)
}

func TestKeyRange(t *testing.T) {
	principal := func(kv ...string) *Principal {
		p, err := authSAS(t, "/devstoreaccount1/mytable?"+serviceSAS(t, devKey, with(baseFields(), kv...)), nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name   string
		kv     []string
		in     [][2]string
		out    [][2]string
		single bool
	}{
		{"spk", []string{"spk", "b"}, [][2]string{{"b", ""}, {"c", "a"}}, [][2]string{{"a", "z"}}, false},
		{"spk srk", []string{"spk", "b", "srk", "m"}, [][2]string{{"b", "m"}, {"b", "z"}, {"c", ""}}, [][2]string{{"b", "l"}, {"a", "z"}}, false},
		{"epk", []string{"epk", "b"}, [][2]string{{"b", "zzz"}, {"a", ""}}, [][2]string{{"c", ""}, {"ba", ""}}, false},
		{"epk erk", []string{"epk", "b", "erk", "m"}, [][2]string{{"b", "m"}, {"a", "z"}}, [][2]string{{"b", "n"}, {"c", ""}}, false},
		{"one partition", []string{"spk", "p", "epk", "p"}, [][2]string{{"p", ""}, {"p", "z"}}, [][2]string{{"o", "z"}, {"q", ""}}, false},
		{"one entity", []string{"spk", "p", "srk", "r", "epk", "p", "erk", "r"}, [][2]string{{"p", "r"}}, [][2]string{{"p", "q"}, {"p", "rr"}}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := principal(c.kv...)
			for _, k := range c.in {
				if err := p.CheckKey(k[0], k[1]); err != nil {
					t.Errorf("(%q,%q) refused: %v", k[0], k[1], err)
				}
			}
			for _, k := range c.out {
				err := p.CheckKey(k[0], k[1])
				if ErrorCode(err) != CodeAuthorizationFailure {
					t.Errorf("(%q,%q): got %v, want AuthorizationFailure", k[0], k[1], err)
				}
			}
			full, _ := p.KeyRange()
			if c.single {
				if pk, rk, ok := full.Point(); !ok || pk != "p" || rk != "r" {
					t.Fatalf("one-entity SAS clips to %v", full)
				}
			}
		})
	}
}

// TestKeyRangeClipsQueries checks the SAS range a query is confined to
// (partition.EntityQuery.Scope) by intersecting it with query ranges.
func TestKeyRangeClipsQueries(t *testing.T) {
	p, err := authSAS(t, "/devstoreaccount1/mytable?"+serviceSAS(t, devKey, with(baseFields(), "spk", "c", "epk", "m", "erk", "5")), nil)
	if err != nil {
		t.Fatal(err)
	}
	before := func(pk, rk string) odata.Position {
		return odata.Position{Kind: odata.BeforeKey, PartitionKey: pk, RowKey: rk}
	}
	after := func(pk, rk string) odata.Position {
		return odata.Position{Kind: odata.AfterKey, PartitionKey: pk, RowKey: rk}
	}
	afterP := func(pk string) odata.Position { return odata.Position{Kind: odata.AfterPartition, PartitionKey: pk} }
	kr, limited := p.KeyRange()
	if !limited {
		t.Fatal("a SAS with spk/epk/erk must limit the key range")
	}
	for _, c := range []struct {
		name string
		in   odata.KeyRange
		want odata.KeyRange
		ok   bool
	}{
		{"inside", odata.KeyRange{Start: before("d", ""), End: afterP("d")}, odata.KeyRange{Start: before("d", ""), End: afterP("d")}, true},
		{"overlap low", odata.KeyRange{Start: before("a", ""), End: afterP("d")}, odata.KeyRange{Start: before("c", ""), End: afterP("d")}, true},
		{"overlap high", odata.KeyRange{Start: before("k", "x"), End: afterP("z")}, odata.KeyRange{Start: before("k", "x"), End: after("m", "5")}, true},
		{"partition m", odata.KeyRange{Start: before("m", ""), End: afterP("m")}, odata.KeyRange{Start: before("m", ""), End: after("m", "5")}, true},
		{"below", odata.KeyRange{Start: before("a", ""), End: afterP("b")}, odata.KeyRange{}, false},
		{"above", odata.KeyRange{Start: before("m", "6"), End: afterP("z")}, odata.KeyRange{}, false},
		{"touching end", odata.KeyRange{Start: after("m", "5"), End: afterP("m")}, odata.KeyRange{}, false},
		{"point inside", odata.KeyRange{Start: before("m", "5"), End: after("m", "5")}, odata.KeyRange{Start: before("m", "5"), End: after("m", "5")}, true},
	} {
		got, ok := kr.Intersect(c.in)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("%s: %v ∩ %v = %v, %v; want %v, %v", c.name, kr, c.in, got, ok, c.want, c.ok)
		}
	}
	if got, ok := kr.Intersect(odata.FullRange); !ok || got != kr {
		t.Fatalf("%v ∩ full range = %v", kr, got)
	}
}

// accountSAS signs an account SAS with the string to sign written out.
func accountSAS(t *testing.T, key string, f map[string]string) string {
	t.Helper()
	get := func(k string) string { return f[k] }
	sts := "devstoreaccount1\n" + get("sp") + "\n" + get("ss") + "\n" + get("srt") + "\n" + get("st") + "\n" +
		get("se") + "\n" + get("sip") + "\n" + get("spr") + "\n" + get("sv") + "\n"
	if get("sv") >= "2020-12-06" {
		sts += get("ses") + "\n"
	}
	kv := []string{}
	for _, k := range []string{"sv", "ss", "srt", "sp", "st", "se", "sip", "spr", "ses"} {
		kv = append(kv, k, f[k])
	}
	return sasQuery(mac(t, key, sts), kv...)
}

func accountFields() map[string]string {
	return map[string]string{"sv": "2019-02-02", "ss": "t", "srt": "sco", "sp": "rwdlacu", "se": sasExpiry}
}

func TestAccountSASKnownAnswer(t *testing.T) {
	sts := "devstoreaccount1\nrwdlacu\nbt\nsco\n2024-03-26T00:00:00Z\n2024-03-27T00:00:00Z\n\nhttps,http\n2021-06-08\nscope1\n"
	q := "sv=2021-06-08&ss=bt&srt=sco&sp=rwdlacu&st=2024-03-26T00%3A00%3A00Z&se=2024-03-27T00%3A00%3A00Z&spr=https%2Chttp&ses=scope1&sig=" + url.QueryEscape(mac(t, devKey, sts))
	p, err := authSAS(t, "/devstoreaccount1/Tables?"+q, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != KindAccountSAS || p.String() != "AccountSAS(devstoreaccount1, ss=bt, srt=cos, sp=acdlruw)" {
		t.Fatalf("principal %v", p)
	}
	// Before 2020-12-06 there is no encryption-scope line.
	if _, err := authSAS(t, "/devstoreaccount1/Tables?"+accountSAS(t, devKey2, accountFields()), nil); err != nil {
		t.Fatal(err)
	}
}

func TestAccountSASRefusals(t *testing.T) {
	for _, c := range []struct {
		name   string
		query  string
		status int
		code   string
	}{
		{"wrong key", accountSAS(t, otherKey, accountFields()), 403, CodeAuthenticationFailed},
		{"expired", accountSAS(t, devKey, with(accountFields(), "se", "2024-03-26T08:00:00Z")), 403, CodeAuthenticationFailed},
		{"not yet valid", accountSAS(t, devKey, with(accountFields(), "st", "2024-03-26T08:30:00Z")), 403, CodeAuthenticationFailed},
		{"missing srt", accountSAS(t, devKey, with(accountFields(), "srt", "")), 403, CodeAuthenticationFailed},
		{"missing sp", accountSAS(t, devKey, with(accountFields(), "sp", "")), 403, CodeAuthenticationFailed},
		{"missing se", accountSAS(t, devKey, with(accountFields(), "se", "")), 403, CodeAuthenticationFailed},
		{"old version", accountSAS(t, devKey, with(accountFields(), "sv", "2013-08-15")), 403, CodeAuthenticationFailed},
		{"unknown service", accountSAS(t, devKey, with(accountFields(), "ss", "tz")), 403, CodeAuthenticationFailed},
		{"unknown resource type", accountSAS(t, devKey, with(accountFields(), "srt", "sx")), 403, CodeAuthenticationFailed},
		{"unknown permission", accountSAS(t, devKey, with(accountFields(), "sp", "rq")), 403, CodeAuthenticationFailed},
		{"ip outside", accountSAS(t, devKey, with(accountFields(), "sip", "10.0.0.1-10.0.0.9")), 403, CodeAuthorizationSourceIPMismatch},
		{"https only", accountSAS(t, devKey, with(accountFields(), "spr", "https")), 403, CodeAuthorizationProtocolMismatch},
		{"tampered", strings.Replace(accountSAS(t, devKey, accountFields()), "sp=rwdlacu", "sp=rwdlacup", 1), 403, CodeAuthenticationFailed},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := authSAS(t, "/devstoreaccount1/Tables?"+c.query, nil)
			wantCode(t, err, c.status, c.code)
		})
	}
	t.Run("stored policy", func(t *testing.T) {
		q := accountSAS(t, devKey, accountFields()) + "&si=p1"
		_, err := authSAS(t, "/devstoreaccount1/Tables?"+q, nil)
		wantCode(t, err, 403, CodeAuthenticationFailed)
	})
}

func TestAccountSASCanDo(t *testing.T) {
	principal := func(kv ...string) *Principal {
		p, err := authSAS(t, "/devstoreaccount1/Tables?"+accountSAS(t, devKey, with(accountFields(), kv...)), nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		kv   []string
		op   Operation
		code string
	}{
		{nil, OpQueryTables, ""},
		{nil, OpCreateTable, ""},
		{[]string{"sp", "w"}, OpCreateTable, ""},
		{[]string{"sp", "r"}, OpCreateTable, CodeAuthorizationPermissionMismatch},
		{nil, OpDeleteTable, ""},
		{[]string{"srt", "o"}, OpDeleteTable, CodeAuthorizationResourceTypeMismatch},
		{[]string{"sp", "r"}, OpQueryTables, CodeAuthorizationPermissionMismatch},
		{nil, OpQueryEntities, ""},
		{[]string{"srt", "sc"}, OpQueryEntities, CodeAuthorizationResourceTypeMismatch},
		{nil, OpInsertEntity, ""},
		{[]string{"sp", "u"}, OpInsertOrMergeEntity, CodeAuthorizationPermissionMismatch},
		{[]string{"sp", "au"}, OpInsertOrReplaceEntity, ""},
		{[]string{"sp", "u"}, OpUpdateEntity, ""},
		{[]string{"sp", "u"}, OpMergeEntity, ""},
		{[]string{"sp", "r"}, OpDeleteEntity, CodeAuthorizationPermissionMismatch},
		{nil, OpGetServiceProperties, ""},
		{[]string{"sp", "r"}, OpSetServiceProperties, CodeAuthorizationPermissionMismatch},
		{[]string{"srt", "co"}, OpGetServiceStats, CodeAuthorizationResourceTypeMismatch},
		{nil, OpGetTableACL, CodeAuthorizationFailure},
		{nil, OpSetTableACL, CodeAuthorizationFailure},
		{nil, OpBatch, ""},
		{[]string{"ss", "bq"}, OpQueryEntities, CodeAuthorizationServiceMismatch},
		{[]string{"ss", "bq"}, OpBatch, CodeAuthorizationServiceMismatch},
	} {
		err := principal(c.kv...).CanDo(c.op, "t1")
		if got := ErrorCode(err); got != c.code || (c.code == "" && err != nil) {
			t.Errorf("%v %v: got %v, want %q", c.kv, c.op, err, c.code)
		}
	}
	p := principal()
	if err := p.CheckKey("any", "key"); err != nil {
		t.Fatal(err)
	}
	if r, limited := p.KeyRange(); limited || r != odata.FullRange {
		t.Fatal("account SAS must not limit the key range")
	}
}

func TestSASWithoutSignatureParameterIsNotSAS(t *testing.T) {
	_, err := authSAS(t, "/devstoreaccount1/mytable?sv=2019-02-02&tn=mytable&sp=r&se="+sasExpiry, nil)
	wantCode(t, err, 403, CodeAuthenticationFailed)
}
