package auth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRealWorldVectors replays requests captured from SDKs talking to the
// emulator (the requests and Authorization headers are in Azurite's debug
// logs quoted in its issue tracker); each signature was made by the SDK with
// the development key, so they pin the string to sign to what real clients
// compute, account-twice canonicalized resource included.
func TestRealWorldVectors(t *testing.T) {
	a := DefaultAccounts()
	cases := []struct {
		name, method, target string
		hdr                  map[string]string
		now                  time.Time
		kind                 Kind
	}{
		{
			// Azurite #2381: Durable Functions (Azure.Data.Tables era, SharedKey).
			name: "sharedkey-get", method: "GET", target: "http://127.0.0.1:10002/devstoreaccount1/TestHubNameInstances",
			hdr: map[string]string{"x-ms-date": "Tue, 26 Mar 2024 08:12:52 GMT",
				"Authorization": "SharedKey devstoreaccount1:J47njd5k0R/5/ACiZVzb+czpFCADm+t6VJNJUD6i/Ts="},
			now: time.Date(2024, 3, 26, 8, 13, 0, 0, time.UTC), kind: KindSharedKey,
		},
		{
			// Azurite #806: Azure-Storage/9.3.2 (.NET) create table, Content-Type signed.
			name: "sharedkey-post", method: "POST", target: "http://127.0.0.1:10002/devstoreaccount1/Tables()",
			hdr: map[string]string{"x-ms-date": "Sat, 05 Jun 2021 23:40:54 GMT", "Content-Type": "application/json",
				"Authorization": "SharedKey devstoreaccount1:URQdOMxn4AEv5sCjiqL5BzHj4lJayHMC0Cg2xBJXpyk="},
			now: time.Date(2021, 6, 5, 23, 41, 0, 0, time.UTC), kind: KindSharedKey,
		},
		{
			// Azurite #1192: Microsoft.Azure.Cosmos.Table 1.0.8 $batch.
			name: "sharedkey-batch", method: "POST", target: "http://127.0.0.1:10102/devstoreaccount1/$batch",
			hdr: map[string]string{"x-ms-date": "Thu, 25 Nov 2021 10:29:54 GMT",
				"Content-Type":  "multipart/mixed; boundary=batch_b35d0ab7-b73b-42ef-8496-eeb501e79e14",
				"Authorization": "SharedKey devstoreaccount1:AaBw06LMxkgwwOeKRTHHGgi7O2n9FSvYDvX1I6sfUeQ="},
			now: time.Date(2021, 11, 25, 10, 30, 0, 0, time.UTC), kind: KindSharedKey,
		},
		{
			// Azurite #1745: azsdk-net-Data.Tables/12.3.0, SharedKeyLite, with a query string.
			name: "sharedkeylite-query", method: "GET",
			target: "http://127.0.0.1:10002/devstoreaccount1/GrainDirectory()?$filter=PartitionKey%20eq%20%27a%27",
			hdr: map[string]string{"x-ms-date": "Sun, 30 Oct 2022 14:28:12 GMT", "x-ms-version": "2019-02-02",
				"Authorization": "SharedKeyLite devstoreaccount1:S0LRmKPBiup6KE2rbg0aPMG6m3YhXePPI4pG7KEdNIk="},
			now: time.Date(2022, 10, 30, 14, 28, 0, 0, time.UTC), kind: KindSharedKeyLite,
		},
		{
			// Azurite #749: Logic Apps account SAS on $batch, permissions in a
			// non-canonical order ("racupwdl").
			name: "account-sas", method: "POST",
			target: "http://127.0.0.1/devstoreaccount1/$batch?sv=2018-03-28&sig=PIbzxevR9LNa4rHkaAb7ARBkPVOzkzvH2r%2FmVuy%2FSpI%3D&se=2023-04-08T00%3A49%3A44Z&srt=sco&ss=bqt&sp=racupwdl&timeout=6",
			now:    time.Date(2021, 4, 8, 0, 49, 45, 0, time.UTC), kind: KindAccountSAS,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := a.Authenticate(context.Background(), newReq(c.method, c.target, c.hdr), Address{Account: DevAccountName}, c.now, nil)
			if err != nil {
				t.Fatal(err)
			}
			if p.Kind != c.kind || p.Account != DevAccountName {
				t.Fatalf("principal %v", p)
			}
		})
	}
}

// TestSharedKeyLiteKnownAnswer writes the string to sign by hand for a fixed
// request and compares with an HMAC computed here.
func TestSharedKeyLiteKnownAnswer(t *testing.T) {
	date := "Tue, 26 Mar 2024 08:12:52 GMT"
	sts := date + "\n" + "/devstoreaccount1/devstoreaccount1/mytable(PartitionKey='pk',RowKey='rk')"
	r := newReq("GET", "http://127.0.0.1:10002/devstoreaccount1/mytable(PartitionKey='pk',RowKey='rk')?$select=a", map[string]string{
		"x-ms-date": date, "Authorization": "SharedKeyLite devstoreaccount1:" + mac(t, devKey, sts),
	})
	if _, err := testAccounts(t).Authenticate(context.Background(), r, Address{Account: DevAccountName}, refTime, nil); err != nil {
		t.Fatal(err)
	}
}

// TestSharedKeyKnownAnswer covers the full Table Shared Key string: verb,
// Content-MD5, Content-Type, date, and ?comp= kept from the query.
func TestSharedKeyKnownAnswer(t *testing.T) {
	date := "Tue, 26 Mar 2024 08:12:52 GMT"
	sts := "PUT\n" + "Q2hlY2sgSW50ZWdyaXR5IQ==\n" + "application/xml\n" + date + "\n" + "/devstoreaccount1/devstoreaccount1/mytable?comp=acl"
	r := newReq("PUT", "http://127.0.0.1:10002/devstoreaccount1/mytable?timeout=30&comp=acl", map[string]string{
		"x-ms-date": date, "Content-MD5": "Q2hlY2sgSW50ZWdyaXR5IQ==", "Content-Type": "application/xml",
		"Authorization": "SharedKey devstoreaccount1:" + mac(t, devKey, sts),
	})
	p, err := testAccounts(t).Authenticate(context.Background(), r, Address{Account: DevAccountName}, refTime, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != KindSharedKey {
		t.Fatalf("kind %v", p.Kind)
	}
}

// TestSDKStyleRoundTrip sends requests over a real connection, built the way
// the SDKs build them, so the server sees the path exactly as put on the
// wire: aztables doubles quotes and escapes key values with
// url.PathEscape, dates with http.TimeFormat, and signs
// "/" + account + URL.EscapedPath(); @azure/data-tables signs
// "/" + account + URL.pathname.
func TestSDKStyleRoundTrip(t *testing.T) {
	accounts := testAccounts(t)
	now := time.Date(2006, 1, 2, 15, 4, 5, 0, time.UTC)
	var got error
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, got = accounts.Authenticate(context.Background(), r, Address{Account: DevAccountName}, now, nil)
	}))
	defer srv.Close()

	pk := strings.ReplaceAll("Alice's Café/#?", "'", "''")
	entityPath := "/devstoreaccount1/my%20table2(PartitionKey='" + url.PathEscape(pk) + "',RowKey='" + url.PathEscape("r k") + "')"
	for _, c := range []struct {
		name, method, path, query, scheme, key string
		headers                                map[string]string
	}{
		{name: "aztables-get-entity", method: "GET", path: entityPath, query: "$format=application%2Fjson%3Bodata%3Dminimalmetadata", scheme: "SharedKeyLite", key: devKey},
		{name: "aztables-key2", method: "DELETE", path: entityPath, scheme: "SharedKeyLite", key: devKey2},
		{name: "js-create-table", method: "POST", path: "/devstoreaccount1/Tables", scheme: "SharedKeyLite", key: devKey},
		{name: "service-properties", method: "PUT", path: "/devstoreaccount1/", query: "restype=service&comp=properties", scheme: "SharedKeyLite", key: devKey},
		{name: "sharedkey-with-type", method: "POST", path: "/devstoreaccount1/$batch", scheme: "SharedKey", key: devKey,
			headers: map[string]string{"Content-Type": "multipart/mixed; boundary=batch_x"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := srv.URL + c.path
			if c.query != "" {
				u += "?" + c.query
			}
			req, err := http.NewRequest(c.method, u, strings.NewReader(""))
			if err != nil {
				t.Fatal(err)
			}
			date := now.Format(http.TimeFormat)
			req.Header.Set("x-ms-date", date)
			req.Header.Set("x-ms-version", "2019-02-02")
			for k, v := range c.headers {
				req.Header.Set(k, v)
			}
			resource := "/devstoreaccount1" + req.URL.EscapedPath()
			if strings.Contains(c.query, "comp=properties") {
				resource += "?comp=properties"
			}
			sts := date + "\n" + resource
			if c.scheme == "SharedKey" {
				sts = c.method + "\n\n" + req.Header.Get("Content-Type") + "\n" + date + "\n" + resource
			}
			req.Header.Set("Authorization", c.scheme+" devstoreaccount1:"+mac(t, c.key, sts))
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if got != nil {
				t.Fatalf("%s %s: %v", c.method, req.URL.EscapedPath(), got)
			}
		})
	}
}

func TestCanonicalizedResourceForms(t *testing.T) {
	date := "Tue, 26 Mar 2024 08:12:52 GMT"
	a := testAccounts(t)
	for _, c := range []struct{ name, target, resource string }{
		{"path-style", "/devstoreaccount1/t1", "/devstoreaccount1/devstoreaccount1/t1"},
		{"single-account form", "/devstoreaccount1/t1", "/devstoreaccount1/t1"},
		{"production-style host", "/t1()", "/devstoreaccount1/t1()"},
		{"secondary endpoint", "/devstoreaccount1-secondary/t1", "/devstoreaccount1/devstoreaccount1/t1"},
		{"service root", "/devstoreaccount1/?restype=service&comp=stats", "/devstoreaccount1/devstoreaccount1/?comp=stats"},
		{"account only", "/devstoreaccount1?comp=properties&restype=service", "/devstoreaccount1/?comp=properties"},
		{"encoded as sent", "/devstoreaccount1/t1(PartitionKey='a%20b',RowKey='%27%27')", "/devstoreaccount1/devstoreaccount1/t1(PartitionKey='a%20b',RowKey='%27%27')"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newReq("GET", "http://h"+c.target, map[string]string{"x-ms-date": date,
				"Authorization": "SharedKeyLite devstoreaccount1:" + mac(t, devKey, date+"\n"+c.resource)})
			if _, err := a.Authenticate(context.Background(), r, Address{Account: DevAccountName}, refTime, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestSharedKeyDates(t *testing.T) {
	a := testAccounts(t)
	res := "/devstoreaccount1/devstoreaccount1/t1"
	fresh := refTime.Add(-14 * time.Minute).Format(http.TimeFormat)
	other := refTime.Add(-time.Minute).Format(http.TimeFormat)
	ok := func(name string, hdr map[string]string, signed string) {
		t.Helper()
		hdr["Authorization"] = "SharedKeyLite devstoreaccount1:" + mac(t, devKey, signed+"\n"+res)
		if _, err := a.Authenticate(context.Background(), newReq("GET", "/devstoreaccount1/t1", hdr), Address{Account: DevAccountName}, refTime, nil); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	ok("Date only", map[string]string{"Date": fresh}, fresh)
	ok("x-ms-date wins", map[string]string{"Date": other, "x-ms-date": fresh}, fresh)
	ok("Date value signed while x-ms-date present", map[string]string{"Date": other, "x-ms-date": fresh}, other)
	ok("15 minutes ahead", map[string]string{"x-ms-date": refTime.Add(15 * time.Minute).Format(http.TimeFormat)},
		refTime.Add(15*time.Minute).Format(http.TimeFormat))
}

func TestSharedKeyRefusals(t *testing.T) {
	a := testAccounts(t)
	date := refTime.Format(http.TimeFormat)
	res := "/devstoreaccount1/devstoreaccount1/t1"
	good := "SharedKeyLite devstoreaccount1:" + mac(t, devKey, date+"\n"+res)
	stale := refTime.Add(-16 * time.Minute).Format(http.TimeFormat)
	future := refTime.Add(16 * time.Minute).Format(http.TimeFormat)
	for _, c := range []struct {
		name, account, target string
		hdr                   map[string]string
		status                int
		code                  string
	}{
		{"wrong key", DevAccountName, "/devstoreaccount1/t1", map[string]string{"x-ms-date": date,
			"Authorization": "SharedKeyLite devstoreaccount1:" + mac(t, otherKey, date+"\n"+res)}, 403, CodeAuthenticationFailed},
		{"other account in header", DevAccountName, "/devstoreaccount1/t1", map[string]string{"x-ms-date": date,
			"Authorization": "SharedKeyLite other:" + mac(t, otherKey, date+"\n/other/devstoreaccount1/t1")}, 403, CodeAuthenticationFailed},
		{"signed for another account", "other", "/other/t1", map[string]string{"x-ms-date": date,
			"Authorization": "SharedKeyLite other:" + mac(t, devKey, date+"\n/other/other/t1")}, 403, CodeAuthenticationFailed},
		{"unknown account", "nosuch", "/nosuch/t1", map[string]string{"x-ms-date": date, "Authorization": good}, 400, CodeInvalidOperation},
		{"other path", DevAccountName, "/devstoreaccount1/t2", map[string]string{"x-ms-date": date, "Authorization": good}, 403, CodeAuthenticationFailed},
		{"lite signature as SharedKey", DevAccountName, "/devstoreaccount1/t1", map[string]string{"x-ms-date": date,
			"Authorization": strings.Replace(good, "SharedKeyLite", "SharedKey", 1)}, 403, CodeAuthenticationFailed},
		{"tampered signature", DevAccountName, "/devstoreaccount1/t1", map[string]string{"x-ms-date": date,
			"Authorization": good[:len(good)-6] + "AAAAA="}, 403, CodeAuthenticationFailed},
		{"stale date", DevAccountName, "/devstoreaccount1/t1", map[string]string{"x-ms-date": stale,
			"Authorization": "SharedKeyLite devstoreaccount1:" + mac(t, devKey, stale+"\n"+res)}, 403, CodeAuthenticationFailed},
		{"future date", DevAccountName, "/devstoreaccount1/t1", map[string]string{"x-ms-date": future,
			"Authorization": "SharedKeyLite devstoreaccount1:" + mac(t, devKey, future+"\n"+res)}, 403, CodeAuthenticationFailed},
		{"garbled date", DevAccountName, "/devstoreaccount1/t1", map[string]string{"x-ms-date": "yesterday",
			"Authorization": "SharedKeyLite devstoreaccount1:" + mac(t, devKey, "yesterday\n"+res)}, 403, CodeAuthenticationFailed},
		{"no date", DevAccountName, "/devstoreaccount1/t1", map[string]string{"Authorization": good}, 403, CodeAuthenticationFailed},
		{"no scheme", DevAccountName, "/devstoreaccount1/t1", map[string]string{"x-ms-date": date, "Authorization": "devstoreaccount1:abc"}, 403, CodeAuthenticationFailed},
		{"bearer", DevAccountName, "/devstoreaccount1/t1", map[string]string{"x-ms-date": date, "Authorization": "Bearer eyJ0eXAi"}, 403, CodeAuthenticationFailed},
		{"no colon", DevAccountName, "/devstoreaccount1/t1", map[string]string{"x-ms-date": date, "Authorization": "SharedKey devstoreaccount1"}, 403, CodeAuthenticationFailed},
		{"empty signature", DevAccountName, "/devstoreaccount1/t1", map[string]string{"x-ms-date": date, "Authorization": "SharedKey devstoreaccount1:"}, 403, CodeAuthenticationFailed},
		{"bad base64", DevAccountName, "/devstoreaccount1/t1", map[string]string{"x-ms-date": date, "Authorization": "SharedKey devstoreaccount1:!!!"}, 403, CodeAuthenticationFailed},
		{"short signature", DevAccountName, "/devstoreaccount1/t1", map[string]string{"x-ms-date": date, "Authorization": "SharedKey devstoreaccount1:AAAA"}, 403, CodeAuthenticationFailed},
		{"no credentials", DevAccountName, "/devstoreaccount1/t1", map[string]string{"x-ms-date": date}, 403, CodeAuthenticationFailed},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := a.Authenticate(context.Background(), newReq("GET", c.target, c.hdr), Address{Account: c.account}, refTime, nil)
			wantCode(t, err, c.status, c.code)
			if strings.Contains(err.Error(), devKey) || strings.Contains(err.Error(), otherKey) {
				t.Fatalf("error leaks a key: %v", err)
			}
		})
	}
	t.Run("two authorization headers", func(t *testing.T) {
		r := newReq("GET", "/devstoreaccount1/t1", map[string]string{"x-ms-date": date})
		r.Header.Add("Authorization", good)
		r.Header.Add("Authorization", good)
		_, err := a.Authenticate(context.Background(), r, Address{Account: DevAccountName}, refTime, nil)
		wantCode(t, err, 403, CodeAuthenticationFailed)
	})
}

func TestSharedKeyPrincipalMayDoAnything(t *testing.T) {
	p := &Principal{Account: DevAccountName, Kind: KindSharedKey}
	for op := OpQueryTables; op <= OpBatch; op++ {
		if err := p.CanDo(op, "t1"); err != nil {
			t.Errorf("%v: %v", op, err)
		}
	}
	if err := p.CheckKey("any", "key"); err != nil {
		t.Fatal(err)
	}
	if _, limited := p.KeyRange(); limited || p.IsSAS() {
		t.Fatal("shared key principal is limited")
	}
	if p.String() != "SharedKey(devstoreaccount1)" {
		t.Fatalf("String %q", p.String())
	}
}

// TestSharedKeyConcurrentKeys checks that the pooled MAC states never mix
// keys or leak one request's input into another's: concurrent requests
// signed with key1, key2, another account's key or over another string
// must each get their own verdict.
func TestSharedKeyConcurrentKeys(t *testing.T) {
	a := testAccounts(t)
	date := "Tue, 26 Mar 2024 08:12:52 GMT"
	sts := date + "\n" + "/devstoreaccount1/devstoreaccount1/mytable"
	cases := []struct {
		sig  string
		want bool
	}{
		{mac(t, devKey, sts), true},
		{mac(t, devKey2, sts), true},
		{mac(t, otherKey, sts), false},
		{mac(t, devKey, sts+"x"), false},
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				c := cases[(g+i)%len(cases)]
				r := newReq("GET", "http://127.0.0.1:10002/devstoreaccount1/mytable", map[string]string{
					"x-ms-date": date, "Authorization": "SharedKeyLite devstoreaccount1:" + c.sig,
				})
				_, err := a.Authenticate(context.Background(), r, Address{Account: DevAccountName}, refTime, nil)
				if (err == nil) != c.want {
					t.Errorf("goroutine %d request %d: err = %v, want accepted = %v", g, i, err, c.want)
					return
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkAuthenticateSharedKey(b *testing.B) {
	a, err := ParseAccounts(DevAccountName + ":" + devKey)
	if err != nil {
		b.Fatal(err)
	}
	date := "Tue, 26 Mar 2024 08:12:52 GMT"
	key, _ := base64.StdEncoding.DecodeString(devKey)
	m := hmac.New(sha256.New, key)
	m.Write([]byte("GET\n\n\n" + date + "\n/devstoreaccount1/devstoreaccount1/mytable(PartitionKey='pk',RowKey='rk')"))
	r := newReq("GET", "http://127.0.0.1:10002/devstoreaccount1/mytable(PartitionKey='pk',RowKey='rk')", map[string]string{
		"x-ms-date": date, "Authorization": "SharedKey devstoreaccount1:" + base64.StdEncoding.EncodeToString(m.Sum(nil)),
	})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Authenticate(context.Background(), r, Address{Account: DevAccountName}, refTime, nil); err != nil {
			b.Fatal(err)
		}
	}
}
