package fuzz

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"hash/fnv"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/server/auth"
	"github.com/tabuladb/tabula/server/batch"
)

// srvNow is the fixed clock of the auth fuzz targets; seeds are dated
// around it.
var srvNow = time.Date(2024, 3, 26, 8, 12, 52, 0, time.UTC)

// srvRequest builds the request net/http would hand a handler for
// method and request target, without failing on targets a real server
// would have refused earlier.
func srvRequest(method, target string) *http.Request {
	u, err := url.ParseRequestURI(target)
	if err != nil {
		u = &url.URL{Path: "/"}
	}
	if method == "" {
		method = http.MethodGet
	}
	return &http.Request{Method: method, URL: u, RequestURI: target, Header: http.Header{}, RemoteAddr: "192.0.2.10:5000"}
}

// srvCheckAuthResult checks what any Authenticate call must satisfy: a
// refusal is an *auth.Error with a 4xx status that names no key; a
// principal is for the account asked about and answers every question
// without panicking, its key checks agreeing with its key range.
func srvCheckAuthResult(t *testing.T, p *auth.Principal, err error) {
	t.Helper()
	if err != nil {
		var e *auth.Error
		if !errors.As(err, &e) || e.Status < 400 || e.Status > 499 || e.Code == "" || e.Message == "" {
			t.Fatalf("refusal %v is not a 4xx *auth.Error", err)
		}
		if strings.Contains(err.Error(), auth.DevAccountKey) {
			t.Fatalf("error leaks the key: %v", err)
		}
		return
	}
	if p == nil || p.Account != auth.DevAccountName {
		t.Fatalf("principal %v", p)
	}
	for op := auth.OpQueryTables; op <= auth.OpBatch; op++ {
		for _, table := range []string{"", "mytable", "other"} {
			if err := p.CanDo(op, table); err != nil && auth.ErrorCode(err) == "" {
				t.Fatalf("CanDo(%v, %q): %v is not an *auth.Error", op, table, err)
			}
		}
	}
	kr, _ := p.KeyRange()
	for _, k := range [][2]string{{"", ""}, {"a", "b"}, {"p1", ""}, {"p9", "r9"}, {"zzz", "zzz"}} {
		in := kr.Contains([]byte(k[0]), []byte(k[1]))
		if err := p.CheckKey(k[0], k[1]); (err == nil) != in {
			t.Fatalf("CheckKey(%q, %q) = %v, key range %v contains it: %v", k[0], k[1], err, kr, in)
		}
	}
	_ = p.String()
}

// FuzzSharedKey authenticates requests with arbitrary Authorization and
// date headers and request targets: every outcome is a principal or a
// service refusal, never a panic. A copy of each request re-signed with
// the development key over the canonicalized resource must authenticate
// whenever its date is fresh.
func FuzzSharedKey(f *testing.F) {
	date := srvNow.Format(http.TimeFormat)
	for _, s := range [][4]string{
		{"GET", "/devstoreaccount1/TestHubNameInstances", "Tue, 26 Mar 2024 08:12:52 GMT", "SharedKey devstoreaccount1:J47njd5k0R/5/ACiZVzb+czpFCADm+t6VJNJUD6i/Ts="},
		{"GET", "/devstoreaccount1/mytable(PartitionKey='pk',RowKey='rk')?$select=a", date, "SharedKeyLite devstoreaccount1:AAAA"},
		{"PUT", "/devstoreaccount1/?restype=service&comp=properties", date, "SharedKeyLite devstoreaccount1:"},
		{"POST", "/devstoreaccount1-secondary/$batch", "Mon, 02 Jan 2006 15:04:05 GMT", "SharedKey devstoreaccount1:!!"},
		{"DELETE", "/t1(PartitionKey='a%20b',RowKey='%27%27')", "garbage", "Bearer x"},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	accounts := auth.DefaultAccounts()
	f.Fuzz(func(t *testing.T, method, target, date, authorization string) {
		if !srvValidHeader(date) || !srvValidHeader(authorization) {
			return // net/http never delivers such header values
		}
		r := srvRequest(method, target)
		r.Header.Set("x-ms-date", date)
		r.Header.Set("Authorization", authorization)
		p, err := accounts.Authenticate(context.Background(), r, auth.Address{Account: auth.DevAccountName}, srvNow, nil)
		srvCheckAuthResult(t, p, err)

		// Re-sign the same request as an SDK would.
		path := target
		if i := strings.IndexAny(path, "?#"); i >= 0 {
			path = path[:i]
		}
		if !strings.HasPrefix(path, "/") || strings.Contains(target, "comp") {
			return // absolute-form and comp targets are covered by the unit tests
		}
		// The secondary endpoint is signed with the primary account name.
		if rest, ok := strings.CutPrefix(path, "/"+auth.DevAccountName+"-secondary"); ok && (rest == "" || rest[0] == '/') {
			path = "/" + auth.DevAccountName + rest
		}
		sig, err := auth.SignString(auth.DevAccountKey, date+"\n/"+auth.DevAccountName+path)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Authorization", "SharedKeyLite "+auth.DevAccountName+":"+sig)
		p, err = accounts.Authenticate(context.Background(), r, auth.Address{Account: auth.DevAccountName}, srvNow, nil)
		srvCheckAuthResult(t, p, err)
		if d, perr := http.ParseTime(date); perr == nil && !d.Before(srvNow.Add(-auth.MaxClockSkew)) && !d.After(srvNow.Add(auth.MaxClockSkew)) && err != nil {
			t.Fatalf("correctly signed request refused: %v", err)
		}
	})
}

func srvValidHeader(v string) bool {
	return !strings.ContainsAny(v, "\r\n\x00")
}

// FuzzSAS authenticates arbitrary query strings as shared access
// signatures. Since random mutations never carry a valid signature, each
// query is also tried re-signed with the development key, which takes it
// past the signature check into the time, IP, protocol, permission,
// policy and key-range checks.
func FuzzSAS(f *testing.F) {
	for _, q := range []string{
		"sv=2019-02-02&tn=mytable&sp=raud&st=2024-03-26T00%3A00%3A00Z&se=2024-03-27T00%3A00%3A00Z&spk=p1&epk=p9&erk=r9&sig=AAAA",
		"sv=2019-02-02&tn=MyTable&si=policy1&sig=x",
		"sv=2015-02-21&tn=mytable&sp=r&se=2024-03-27&sig=x",
		"sv=2013-08-15&tn=mytable&sp=ad&se=2024-03-27T00%3A00Z&srk=a&sig=x",
		"sv=2019-02-02&tn=mytable&sp=r&se=2024-03-27T00%3A00%3A00Z&sip=192.0.2.0-192.0.2.255&spr=https&sig=x",
		"sv=2018-03-28&sig=PIbzxevR9LNa4rHkaAb7ARBkPVOzkzvH2r%2FmVuy%2FSpI%3D&se=2023-04-08T00%3A49%3A44Z&srt=sco&ss=bqt&sp=racupwdl&timeout=6",
		"sv=2021-06-08&ss=t&srt=sco&sp=rwdlacu&se=2024-03-27T00%3A00%3A00Z&spr=https%2Chttp&ses=scope&sig=x",
		"sv=2019-02-02&ss=bq&srt=s&sp=r&se=2024-03-27T00%3A00%3A00Z&sip=10.0.0.1&sig=x",
		"sig=%zz&sv",
		// Valid from exactly srvNow, for one second.
		"sv=2019-02-02&tn=mytable&sp=r&st=2024-03-26T08%3A12%3A52Z&se=2024-03-26T08%3A12%3A53Z&sig=x",
	} {
		f.Add(q)
	}
	accounts := auth.DefaultAccounts()
	lookup := func(ctx context.Context, table, id string) (auth.Policy, bool, error) {
		switch id {
		case "policy1":
			return auth.Policy{Start: srvNow.Add(-time.Hour), Expiry: srvNow.Add(time.Hour), Permission: "ra"}, true, nil
		case "expiry":
			return auth.Policy{Expiry: srvNow.Add(time.Hour)}, true, nil
		}
		return auth.Policy{}, false, nil
	}
	f.Fuzz(func(t *testing.T, rawQuery string) {
		if strings.ContainsAny(rawQuery, "# \r\n\x00") {
			return // not part of a query string on the wire
		}
		try := func(q string) {
			r := srvRequest("GET", "/devstoreaccount1/mytable()?"+q)
			r.URL.RawQuery = q
			p, err := accounts.Authenticate(context.Background(), r, auth.Address{Account: auth.DevAccountName}, srvNow, lookup)
			srvCheckAuthResult(t, p, err)
		}
		try(rawQuery)
		if resigned, ok := srvResign(rawQuery); ok {
			try(resigned)
		}

		// A valid token built from the query's fields and correctly signed
		// is accepted; with one byte of its signature changed, refused.
		q, ok := srvValidSAS(rawQuery)
		if !ok {
			return
		}
		mac, err := auth.SignString(auth.DevAccountKey, srvStringToSign(q))
		if err != nil {
			t.Fatal(err)
		}
		sig, err := base64.StdEncoding.DecodeString(mac)
		if err != nil {
			t.Fatal(err)
		}
		authenticate := func(sig []byte) (*auth.Principal, error) {
			q.Set("sig", base64.StdEncoding.EncodeToString(sig))
			r := srvRequest("GET", "/devstoreaccount1/mytable()")
			r.URL.RawQuery = q.Encode()
			p, err := accounts.Authenticate(context.Background(), r, auth.Address{Account: auth.DevAccountName}, srvNow, lookup)
			srvCheckAuthResult(t, p, err)
			return p, err
		}
		p, err := authenticate(sig)
		if err != nil {
			t.Fatalf("valid, correctly signed SAS %s refused: %v", q.Encode(), err)
		}
		wantKind := auth.KindServiceSAS
		if q.Has("ss") {
			wantKind = auth.KindAccountSAS
		}
		if p.Kind != wantKind || p.Version != q.Get("sv") {
			t.Fatalf("SAS %s gave principal %v", q.Encode(), p)
		}
		h := fnv.New32a()
		h.Write([]byte(rawQuery))
		n := h.Sum32()
		sig[n%uint32(len(sig))] ^= byte(1 << (n / 64 % 8))
		if _, err := authenticate(sig); err == nil {
			t.Fatalf("SAS %s accepted with a changed signature", q.Encode())
		}
	})
}

// srvResign replaces the signature of a SAS query with the development
// key's signature over its fields.
func srvResign(rawQuery string) (string, bool) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", false
	}
	sig, err := auth.SignString(auth.DevAccountKey, srvStringToSign(q))
	if err != nil {
		return "", false
	}
	q.Set("sig", sig)
	return q.Encode(), true
}

// srvStringToSign spells out the strings to sign of create-service-sas
// and create-account-sas for the SAS fields in q.
func srvStringToSign(q url.Values) string {
	g := q.Get
	if g("ss") != "" || g("srt") != "" {
		sts := auth.DevAccountName + "\n" + g("sp") + "\n" + g("ss") + "\n" + g("srt") + "\n" + g("st") + "\n" +
			g("se") + "\n" + g("sip") + "\n" + g("spr") + "\n" + g("sv") + "\n"
		if g("sv") >= "2020-12-06" {
			sts += g("ses") + "\n"
		}
		return sts
	}
	canonical := "/" + auth.DevAccountName + "/" + strings.ToLower(g("tn"))
	if g("sv") >= "2015-02-21" {
		canonical = "/table" + canonical
	}
	fields := []string{g("sp"), g("st"), g("se"), canonical, g("si")}
	if g("sv") >= "2015-04-05" {
		fields = append(fields, g("sip"), g("spr"))
	}
	fields = append(fields, g("sv"), g("spk"), g("srk"), g("epk"), g("erk"))
	return strings.Join(fields, "\n")
}

// srvValidSAS builds from the fields of a fuzzed query a SAS that the
// service must accept at srvNow for a request from srvRequest, following
// create-service-sas and create-account-sas: each field is kept where it
// is valid and otherwise dropped or replaced. It is unsigned. A query that
// does not parse gives nothing.
func srvValidSAS(rawQuery string) (url.Values, bool) {
	in, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, false
	}
	g := in.Get
	// letters keeps the first occurrence of each allowed letter of s.
	letters := func(s, allowed, fallback string) string {
		var out []byte
		for i := 0; i < len(s); i++ {
			if c := s[i]; strings.IndexByte(allowed, c) >= 0 && !bytes.ContainsRune(out, rune(c)) {
				out = append(out, c)
			}
		}
		if len(out) == 0 {
			return fallback
		}
		return string(out)
	}
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	account := g("ss") != "" || g("srt") != ""
	minVersion := "2012-02-12"
	if account {
		minVersion = "2015-04-05"
	}
	if sv := g("sv"); sv >= minVersion {
		set("sv", sv)
	} else {
		set("sv", "2019-02-02")
	}
	// The times: a start that is not after now (or none), an expiry
	// after now and after the start.
	var start time.Time
	if st, err := time.Parse(time.RFC3339, g("st")); err == nil && !st.After(srvNow) {
		start = st
		set("st", g("st"))
	}
	if se, err := time.Parse(time.RFC3339, g("se")); err == nil && se.After(srvNow) && (start.IsZero() || se.After(start)) {
		set("se", g("se"))
	} else {
		set("se", srvNow.Add(time.Hour).Format(time.RFC3339))
	}
	if g("sip") != "" {
		set("sip", "192.0.2.0-192.0.2.255") // holds srvRequest's address
	}
	if spr := g("spr"); spr == "https,http" || spr == "http,https" {
		set("spr", spr) // https alone refuses the plain-http request
	}
	if account {
		set("ss", letters(g("ss"), "bqtf", "t"))
		set("srt", letters(g("srt"), "sco", "o"))
		set("sp", letters(g("sp"), "rwdylacuptfix", "r"))
		set("ses", g("ses"))
		return q, true
	}
	tn := g("tn")
	if tn == "" {
		tn = "mytable"
	}
	set("tn", tn)
	set("sp", letters(g("sp"), "raud", "r"))
	// A field comes from the SAS or its stored policy, never both: see
	// FuzzSAS's lookup for what each policy gives.
	switch si := g("si"); si {
	case "policy1":
		set("si", si)
		q.Del("sp")
		q.Del("st")
		q.Del("se")
	case "expiry":
		set("si", si)
		q.Del("se")
	}
	// A row key bound needs its partition key bound.
	set("spk", g("spk"))
	set("epk", g("epk"))
	if g("spk") != "" {
		set("srk", g("srk"))
	}
	if g("epk") != "" {
		set("erk", g("erk"))
	}
	return q, true
}

// FuzzBatchRequest parses arbitrary $batch bodies: the result is a request
// within the limits, or a 400/413 *batch.Error, never a panic or a hang.
func FuzzBatchRequest(f *testing.F) {
	const ct = "multipart/mixed; boundary=batch_b"
	op := "POST http://127.0.0.1:10002/devstoreaccount1/t1 HTTP/1.1\r\nContent-Type: application/json\r\nPrefer: return-no-content\r\n\r\n{\"PartitionKey\":\"p\",\"RowKey\":\"r\"}"
	changeset := "--batch_b\r\nContent-Type: multipart/mixed; boundary=changeset_c\r\n\r\n" +
		"--changeset_c\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n" + op + "\r\n" +
		"--changeset_c\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n" +
		"DELETE http://127.0.0.1:10002/devstoreaccount1/t1(PartitionKey='p',RowKey='r%27%27x') HTTP/1.1\r\nIf-Match: *\r\n\r\n\r\n" +
		"--changeset_c--\r\n--batch_b--\r\n"
	f.Add(ct, []byte(changeset))
	f.Add(ct, []byte(strings.ReplaceAll(changeset, "\r\n", "\n")))
	f.Add(`multipart/mixed; boundary="batch_b"`, []byte("--batch_b\r\nContent-Type: application/http\r\n\r\nGET t1(PartitionKey='a',RowKey='b') HTTP/1.1\r\n\r\n--batch_b--"))
	f.Add(ct, []byte("--batch_b\r\nContent-Type: multipart/mixed; boundary=changeset_c\r\n\r\n--changeset_c--\r\n--batch_b--\r\n"))
	f.Add("application/json", []byte("{}"))
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		limits := batch.Limits{MaxBodyBytes: 64 << 10, MaxOperations: 10}
		req, err := batch.Parse(contentType, bytes.NewReader(body), limits)
		if err != nil {
			var e *batch.Error
			if !errors.As(err, &e) || (e.Status != 400 && e.Status != 413) || e.Message == "" || e.Index < -1 || e.Index >= limits.MaxOperations {
				t.Fatalf("refusal %v is not a 400/413 *batch.Error", err)
			}
			return
		}
		n := len(req.Operations)
		if n == 0 || n > limits.MaxOperations || (req.IsQuery() && (n != 1 || req.Operations[0].Method != http.MethodGet)) {
			t.Fatalf("request with %d operations, query %v", n, req.IsQuery())
		}
		total := 0
		for i, op := range req.Operations {
			if op.Index != i || op.Method == "" || op.URL == nil || op.Header == nil {
				t.Fatalf("operation %d: %+v", i, op)
			}
			if op.Body != nil && (len(op.Body) == 0 || !bytes.Contains(body, op.Body)) {
				t.Fatalf("operation %d body %q is not part of the input", i, op.Body)
			}
			total += len(op.Body)
			if tg, err := op.Target(auth.DevAccountName); err == nil && tg.Kind == 0 {
				t.Fatalf("operation %d: target without kind", i)
			} else if err != nil && batch.ErrorCode(err) != batch.CodeInvalidURI {
				t.Fatalf("operation %d: target error %v", i, err)
			}
			if _, err := batch.EffectiveMethod(op.Method, op.Header); err != nil && batch.ErrorCode(err) == "" {
				t.Fatalf("operation %d: EffectiveMethod error %v", i, err)
			}
		}
		if total > len(body) {
			t.Fatalf("bodies hold %d bytes of a %d-byte input", total, len(body))
		}
	})
}
