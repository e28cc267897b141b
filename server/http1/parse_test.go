package http1

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

func TestHeadEnd(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 27},
		{"GET / HTTP/1.1\nHost: a\n\n", 24},
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\nbody", 27},
		{"GET / HTTP/1.1\r\nHost: a\r\n", -1},
		{"GET / HTTP/1.1\r\nHost: a\r\n\r", -1},
		{"", -1},
	} {
		if got := headEnd([]byte(tc.in), 0); got != tc.want {
			t.Errorf("headEnd(%q) = %d, want %d", tc.in, got, tc.want)
		}
		// Resuming where a shorter prefix left off finds the same end.
		for cut := 0; cut <= len(tc.in); cut++ {
			if headEnd([]byte(tc.in[:cut]), 0) >= 0 {
				break
			}
			if got := headEnd([]byte(tc.in), cut); got != tc.want {
				t.Errorf("headEnd(%q) resumed at %d = %d, want %d", tc.in, cut, got, tc.want)
			}
		}
	}
}

func TestParseHead(t *testing.T) {
	req, fr, perr := parseHead(context.Background(), "POST /acct/t()?$filter=a%20eq%201 HTTP/1.1\r\n"+
		"Host: 127.0.0.1:10002\r\n"+
		"x-ms-date: Tue, 24 Nov 2026 10:00:00 GMT\r\n"+
		"X-Ms-Version: 2019-02-02\r\n"+
		"accept:application/json \r\n"+
		"Prefer: return-no-content\r\n"+
		"prefer: x\r\n"+
		"Custom-header: \t v \r\n"+
		"Content-Length: 42\r\n"+
		"\r\n")
	if perr != nil {
		t.Fatal(perr)
	}
	if req.Method != "POST" || req.URL.Path != "/acct/t()" || req.URL.RawQuery != "$filter=a%20eq%201" ||
		req.RequestURI != "/acct/t()?$filter=a%20eq%201" || req.Proto != "HTTP/1.1" || req.ProtoMajor != 1 || req.ProtoMinor != 1 {
		t.Errorf("request line: %+v", req)
	}
	if req.Host != "127.0.0.1:10002" || req.ContentLength != 42 || req.Close {
		t.Errorf("Host %q, ContentLength %d, Close %v", req.Host, req.ContentLength, req.Close)
	}
	want := http.Header{
		"X-Ms-Date":      {"Tue, 24 Nov 2026 10:00:00 GMT"},
		"X-Ms-Version":   {"2019-02-02"},
		"Accept":         {"application/json"},
		"Prefer":         {"return-no-content", "x"},
		"Custom-Header":  {"v"},
		"Content-Length": {"42"},
	}
	if !reflect.DeepEqual(req.Header, want) {
		t.Errorf("header:\n got %v\nwant %v", req.Header, want)
	}
	if fr != (framing{contentLength: 42, keepAlive: true}) {
		t.Errorf("framing %+v", fr)
	}
}

func TestParseHeadFraming(t *testing.T) {
	for _, tc := range []struct {
		name, head string
		want       framing
		close      bool
	}{
		{"no body", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", framing{keepAlive: true}, false},
		{"chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n", framing{chunked: true, keepAlive: true}, false},
		{"equal lengths", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\nContent-Length: 5\r\n\r\n", framing{contentLength: 5, keepAlive: true}, false},
		{"close", "GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, Close\r\n\r\n", framing{}, true},
		{"1.0", "GET / HTTP/1.0\r\n\r\n", framing{}, true},
		{"1.0 keep-alive", "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", framing{keepAlive: true}, false},
		{"continue", "PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n", framing{contentLength: 1, expectContinue: true, keepAlive: true}, false},
		{"continue ignored on 1.0", "PUT / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", framing{contentLength: 1}, true},
	} {
		req, fr, perr := parseHead(context.Background(), tc.head)
		if perr != nil {
			t.Errorf("%s: %v", tc.name, perr)
			continue
		}
		if fr != tc.want || req.Close != tc.close {
			t.Errorf("%s: framing %+v close %v, want %+v close %v", tc.name, fr, req.Close, tc.want, tc.close)
		}
		if fr.chunked && (req.ContentLength != -1 || len(req.TransferEncoding) != 1 || req.Header["Transfer-Encoding"] != nil) {
			t.Errorf("%s: chunked request %+v", tc.name, req)
		}
	}
}

func TestParseHeadRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, head string
		status     int
	}{
		{"no target", "GET HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"extra space", "GET / x HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"bad method", "G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"lower-case proto", "GET / http/1.1\r\nHost: a\r\n\r\n", 400},
		{"HTTP/2.0", "GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505},
		{"HTTP/0.9", "GET / HTTP/0.9\r\nHost: a\r\n\r\n", 505},
		{"bad target", "GET a%zz HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"control in target", "GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"no Host", "GET / HTTP/1.1\r\n\r\n", 400},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
		{"bad Host", "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400},
		{"folded", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n", 400},
		{"no colon", "GET / HTTP/1.1\r\nHost: a\r\nX-A b\r\n\r\n", 400},
		{"space before colon", "GET / HTTP/1.1\r\nHost: a\r\nX-A : b\r\n\r\n", 400},
		{"empty name", "GET / HTTP/1.1\r\nHost: a\r\n: b\r\n\r\n", 400},
		{"CR in value", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\rc\r\n\r\n", 400},
		{"NUL in value", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\x00\r\n\r\n", 400},
		{"negative length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400},
		{"signed length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n", 400},
		{"huge length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9999999999999999999\r\n\r\n", 400},
		{"unequal lengths", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400},
		{"empty length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n", 400},
		{"both framings", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
		{"gzip", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
		{"two codings", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 501},
		{"chunked 1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
		{"odd Expect", "PUT / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\n\r\n", 417},
	} {
		_, _, perr := parseHead(context.Background(), tc.head)
		if perr == nil || perr.status != tc.status {
			t.Errorf("%s: got %v, want status %d", tc.name, perr, tc.status)
		}
	}
}

func TestParseHeadTargets(t *testing.T) {
	req, _, perr := parseHead(context.Background(), "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n")
	if perr != nil || req.URL.Path != "*" {
		t.Errorf("OPTIONS *: %v %v", req, perr)
	}
	req, _, perr = parseHead(context.Background(), "GET http://b:10002/acct/Tables HTTP/1.1\r\nHost: a\r\n\r\n")
	if perr != nil || req.Host != "b:10002" || req.URL.Path != "/acct/Tables" {
		t.Errorf("absolute form: %+v %v", req, perr)
	}
	req, _, perr = parseHead(context.Background(), "GET /a%2Fb HTTP/1.1\r\nHost: a\r\n\r\n")
	if perr != nil || req.URL.EscapedPath() != "/a%2Fb" || req.URL.Path != "/a/b" {
		t.Errorf("escaped path: %+v %v", req.URL, perr)
	}
}

func TestCanonicalKey(t *testing.T) {
	for in, want := range map[string]string{
		"x-ms-date": "X-Ms-Date", "X-MS-DATE": "X-Ms-Date", "content-type": "Content-Type",
		"dataserviceversion": "Dataserviceversion", "DataServiceVersion": "Dataserviceversion", "x-custom": "X-Custom",
	} {
		if got := canonicalKey(in); got != want {
			t.Errorf("canonicalKey(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseChunkSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int64
		good bool
	}{
		{"0", 0, true}, {"1a", 26, true}, {"FF", 255, true}, {"10;ext=1", 16, true}, {"10 ;x", 16, true},
		{"", 0, false}, {";x", 0, false}, {"-1", 0, false}, {"0x10", 0, false}, {"1000000000000000", 0, false}, {"g", 0, false},
	} {
		n, ok := parseChunkSize([]byte(tc.in))
		if ok != tc.good || ok && n != tc.n {
			t.Errorf("parseChunkSize(%q) = %d, %v; want %d, %v", tc.in, n, ok, tc.n, tc.good)
		}
	}
}

func BenchmarkParseHead(b *testing.B) {
	head := "GET /devstoreaccount1/bench(PartitionKey='p0042',RowKey='r042') HTTP/1.1\r\n" +
		"Host: 127.0.0.1:10002\r\nUser-Agent: Go-http-client/1.1\r\nAccept: application/json;odata=nometadata\r\n" +
		"Authorization: SharedKey devstoreaccount1:6a0pF7ZtE2Y3Jq7zqQb9y3wXo0bX0t4mJ7m6b1D2c3E=\r\n" +
		"Dataserviceversion: 3.0\r\nX-Ms-Date: Wed, 25 Nov 2026 08:50:56 GMT\r\nX-Ms-Version: 2019-02-02\r\n" +
		"Accept-Encoding: gzip\r\n\r\n"
	b.ReportAllocs()
	for b.Loop() {
		if _, _, perr := parseHead(context.Background(), strings.Clone(head)); perr != nil {
			b.Fatal(perr)
		}
	}
}
