package server_test

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/tabuladb/tabula/internal/syncbuf"
	"github.com/tabuladb/tabula/server"
	"github.com/tabuladb/tabula/server/auth"
)

// accessRecord is one JSON access log line, every field the log writes.
type accessRecord struct {
	Time            time.Time `json:"time"`
	Level           string    `json:"level"`
	Msg             string    `json:"msg"`
	Method          string    `json:"method"`
	Account         string    `json:"account"`
	Table           string    `json:"table"`
	Operation       string    `json:"operation"`
	Status          int       `json:"status"`
	ErrorCode       string    `json:"error_code"`
	DurationMS      float64   `json:"duration_ms"`
	BytesIn         int64     `json:"bytes_in"`
	BytesOut        int64     `json:"bytes_out"`
	RequestID       string    `json:"request_id"`
	ClientRequestID string    `json:"client_request_id"`
	Path            string    `json:"path"`
	Query           string    `json:"query"`
	Remote          string    `json:"remote"`
	ThresholdMS     float64   `json:"threshold_ms"`
}

// accessRecords parses the JSON lines of out, refusing any unknown field,
// and indexes the access records by request id.
func accessRecords(t *testing.T, out string) map[string][]accessRecord {
	t.Helper()
	byID := map[string][]accessRecord{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.DisallowUnknownFields()
		var r accessRecord
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if r.Msg == "request" || r.Msg == "slow request" {
			byID[r.RequestID] = append(byID[r.RequestID], r)
		}
	}
	return byID
}

// TestAccessLogJSON sends requests of every outcome and checks every field
// of their access log lines against what the client sent and received.
func TestAccessLogJSON(t *testing.T) {
	var out syncbuf.Buffer
	log := slog.New(slog.NewJSONHandler(&out, nil))
	ts := startServer(t, &server.Options{Observer: server.NewAccessLog(log, 0)})
	c := &http.Client{}
	type sent struct {
		resp *http.Response
		body []byte
		in   int
	}
	do := func(method, path, body string, header ...string) sent {
		t.Helper()
		var b []byte
		if body != "" {
			b = []byte(body)
		}
		resp, data := send(t, c, rawRequest(t, ts, method, path, b, true, header...))
		return sent{resp, data, len(b)}
	}
	create := do("POST", "/Tables", `{"TableName":"items"}`, "x-ms-client-request-id", "client-1")
	insert := do("POST", "/items", `{"PartitionKey":"p","RowKey":"r","N":1}`)
	missing := do("GET", "/items(PartitionKey='p',RowKey='nope')", "")
	failedBatch := do("POST", "/$batch", batchBody(batchInsert("p", "r")), "Content-Type", batchCT)
	unrouted := do("PUT", "/items()", "")

	records := accessRecords(t, out.String())
	for _, c := range []struct {
		name      string
		s         sent
		method    string
		table     string
		operation string
		status    int
		code      string
		path      string
	}{
		{"create table", create, "POST", "", "CreateTable", 201, "", "/devstoreaccount1/Tables"},
		{"insert", insert, "POST", "items", "InsertEntity", 201, "", "/devstoreaccount1/items"},
		{"missing entity", missing, "GET", "items", "GetEntity", 404, "ResourceNotFound", "/devstoreaccount1/items(PartitionKey='p',RowKey='nope')"},
		{"failed batch", failedBatch, "POST", "", "Batch", 202, "EntityAlreadyExists", "/devstoreaccount1/$batch"},
		{"unsupported verb", unrouted, "PUT", "items", "", 405, "UnsupportedHttpVerb", "/devstoreaccount1/items()"},
	} {
		id := c.s.resp.Header.Get("x-ms-request-id")
		rs := records[id]
		if len(rs) != 1 {
			t.Errorf("%s: %d access records for request %s", c.name, len(rs), id)
			continue
		}
		r := rs[0]
		if c.s.resp.StatusCode != c.status {
			t.Errorf("%s: the client got %d, want %d", c.name, c.s.resp.StatusCode, c.status)
		}
		if r.Level != "INFO" || r.Msg != "request" || r.Method != c.method || r.Account != "devstoreaccount1" ||
			r.Table != c.table || r.Operation != c.operation || r.Status != c.status || r.ErrorCode != c.code ||
			r.Path != c.path || r.Query != "" || r.ThresholdMS != 0 {
			t.Errorf("%s: record %+v", c.name, r)
		}
		if r.ErrorCode != c.s.resp.Header.Get("x-ms-error-code") {
			t.Errorf("%s: logged error code %q, sent %q", c.name, r.ErrorCode, c.s.resp.Header.Get("x-ms-error-code"))
		}
		if r.BytesIn != int64(c.s.in) || r.BytesOut != int64(len(c.s.body)) {
			t.Errorf("%s: bytes in/out %d/%d, the client sent %d and read %d", c.name, r.BytesIn, r.BytesOut, c.s.in, len(c.s.body))
		}
		if r.DurationMS <= 0 || r.DurationMS > 10_000 || time.Since(r.Time) > time.Minute {
			t.Errorf("%s: duration %v ms at %v", c.name, r.DurationMS, r.Time)
		}
		if host, _, ok := strings.Cut(r.Remote, ":"); !ok || host != "127.0.0.1" {
			t.Errorf("%s: remote %q", c.name, r.Remote)
		}
	}
	if r := records[create.resp.Header.Get("x-ms-request-id")]; len(r) == 1 && r[0].ClientRequestID != "client-1" {
		t.Errorf("client request id %q, want client-1", r[0].ClientRequestID)
	}
	if r := records[insert.resp.Header.Get("x-ms-request-id")]; len(r) == 1 && r[0].ClientRequestID != "" {
		t.Errorf("client request id %q for a request that sent none", r[0].ClientRequestID)
	}
	if len(records) != 5 {
		t.Errorf("%d requests logged, 5 sent:\n%s", len(records), out.String())
	}
}

// noQuickerThan passes every request on to an observer as having taken
// at least min: Go's monotonic clock on Windows ticks in steps of up to
// 15.6 ms, and times a quick request at 0, under any threshold.
type noQuickerThan struct {
	server.Observer
	min time.Duration
}

func (o noQuickerThan) RequestDone(info server.RequestInfo) {
	info.Duration = max(info.Duration, o.min)
	o.Observer.RequestDone(info)
}

// TestAccessLogHoldsNoSecret logs, at debug level and in both formats,
// requests signed with Shared Key and with a SAS, good and bad: neither
// a signature, nor the Authorization header, nor the key ever appears.
func TestAccessLogHoldsNoSecret(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			var out syncbuf.Buffer
			var h slog.Handler = slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})
			if format == "json" {
				h = slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})
			}
			log := slog.New(h)
			ts := startServer(t, &server.Options{Logger: log, Observer: noQuickerThan{server.NewAccessLog(log, time.Nanosecond), 2 * time.Nanosecond}})
			c := &http.Client{}
			var secrets []string
			signed := rawRequest(t, ts, "POST", "/Tables", []byte(`{"TableName":"items"}`), true)
			secrets = append(secrets, signed.Header.Get("Authorization"), strings.SplitN(signed.Header.Get("Authorization"), ":", 2)[1])
			if resp, body := send(t, c, signed); resp.StatusCode != http.StatusCreated {
				t.Fatalf("create: %d %s", resp.StatusCode, body)
			}
			bad := rawRequest(t, ts, "GET", "/Tables", nil, false, "Authorization", "SharedKey devstoreaccount1:c2VjcmV0LXNpZ25hdHVyZS1ub3QtbG9nZ2VkLTAxMjM=")
			secrets = append(secrets, "c2VjcmV0LXNpZ25hdHVyZS1ub3QtbG9nZ2VkLTAxMjM=")
			if resp, _ := send(t, c, bad); resp.StatusCode != http.StatusForbidden {
				t.Fatalf("a bad Shared Key: %d", resp.StatusCode)
			}
			token := serviceSAS(t, aztables.SASSignatureValues{TableName: "items", Permissions: "raud", ExpiryTime: time.Now().Add(time.Hour)})
			q, err := url.ParseQuery(token)
			if err != nil {
				t.Fatal(err)
			}
			sig := q.Get("sig")
			secrets = append(secrets, sig, url.QueryEscape(sig))
			sas := rawRequest(t, ts, "POST", "/items?"+token, []byte(`{"PartitionKey":"p","RowKey":"r"}`), false)
			if resp, body := send(t, c, sas); resp.StatusCode != http.StatusCreated {
				t.Fatalf("insert with a SAS: %d %s", resp.StatusCode, body)
			}
			// A signature spelled otherwise still reaches the SAS check.
			escaped := strings.Replace(token, "sig=", "%73ig=", 1)
			if resp, _ := send(t, c, rawRequest(t, ts, "GET", "/items()?"+escaped, nil, false)); resp.StatusCode != http.StatusOK {
				t.Fatalf("a query with %%73ig=: %d", resp.StatusCode)
			}
			wrongSig := "c2lnbmF0dXJlLW9mLWEtZm9yZ2VkLXNhcy10b2tlbiE="
			secrets = append(secrets, wrongSig, url.QueryEscape(wrongSig))
			forged := strings.Replace(token, "sig="+url.QueryEscape(sig), "sig="+url.QueryEscape(wrongSig), 1)
			if resp, _ := send(t, c, rawRequest(t, ts, "GET", "/items()?"+forged, nil, false)); resp.StatusCode != http.StatusForbidden {
				t.Fatalf("a forged SAS: %d", resp.StatusCode)
			}

			logged := out.String()
			// The header's value, the signatures, the key; and the header
			// itself, by its name, as a log of headers would show it.
			secrets = append(secrets, auth.DevAccountKey, "Authorization:", `"Authorization"`, "Authorization=")
			for _, s := range secrets {
				if s != "" && strings.Contains(logged, s) {
					t.Errorf("the log holds %q:\n%s", s, logged)
				}
			}
			if n := strings.Count(logged, "REDACTED"); n != 2*3 { // three SAS requests, each logged as a request and a slow one
				t.Errorf("%d masked signatures, want 6:\n%s", n, logged)
			}
			if n := strings.Count(logged, "slow request"); n != 5 {
				t.Errorf("%d slow request lines for 5 requests over a 1 ns threshold:\n%s", n, logged)
			}
		})
	}
}

// TestSlowRequestLog: with the log at warn level, only the request that
// took longer than the threshold is logged, as a slow request; below
// warn, the access log writes nothing.
func TestSlowRequestLog(t *testing.T) {
	var out syncbuf.Buffer
	log := slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}))
	faults, err := server.ParseFaultSpec("get:latency=150ms")
	if err != nil {
		t.Fatal(err)
	}
	const threshold = 100 * time.Millisecond
	ts := startServer(t, &server.Options{Faults: faults, Observer: server.NewAccessLog(log, threshold)})
	c := &http.Client{}
	for _, req := range []*http.Request{
		rawRequest(t, ts, "POST", "/Tables", []byte(`{"TableName":"items"}`), true),
		rawRequest(t, ts, "POST", "/items", []byte(`{"PartitionKey":"p","RowKey":"r"}`), true),
	} {
		if resp, body := send(t, c, req); resp.StatusCode != http.StatusCreated {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	resp, _ := send(t, c, rawRequest(t, ts, "GET", "/items(PartitionKey='p',RowKey='r')", nil, true))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("get: %d", resp.StatusCode)
	}
	records := accessRecords(t, out.String())
	if len(records) != 1 {
		t.Fatalf("%d requests logged at warn, want the slow one:\n%s", len(records), out.String())
	}
	rs := records[resp.Header.Get("x-ms-request-id")]
	if len(rs) != 1 {
		t.Fatalf("the slow get has %d records:\n%s", len(rs), out.String())
	}
	if r := rs[0]; r.Level != "WARN" || r.Msg != "slow request" || r.Operation != "GetEntity" || r.Status != 200 ||
		r.DurationMS < 150 || r.ThresholdMS != 100 {
		t.Fatalf("slow request record %+v", r)
	}

	// Off: no threshold, and a log at error level, write nothing.
	var quiet syncbuf.Buffer
	ts2 := startServer(t, &server.Options{Faults: faults, Observer: server.NewAccessLog(
		slog.New(slog.NewJSONHandler(&quiet, &slog.HandlerOptions{Level: slog.LevelError})), threshold)})
	send(t, c, rawRequest(t, ts2, "GET", "/items(PartitionKey='p',RowKey='r')", nil, true))
	var none syncbuf.Buffer
	ts3 := startServer(t, &server.Options{Faults: faults, Observer: server.NewAccessLog(
		slog.New(slog.NewJSONHandler(&none, &slog.HandlerOptions{Level: slog.LevelWarn})), 0)})
	send(t, c, rawRequest(t, ts3, "GET", "/items(PartitionKey='p',RowKey='r')", nil, true))
	if quiet.String() != "" || none.String() != "" {
		t.Fatalf("an access log that should be silent wrote %q and %q", quiet.String(), none.String())
	}
}

func TestMaskSignature(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"$filter=PartitionKey%20eq%20'p'", "$filter=PartitionKey%20eq%20'p'"},
		{"sv=2019-02-02&sig=abc%2Bdef%3D&se=x", "sv=2019-02-02&sig=REDACTED&se=x"},
		{"SIG=abc&sig=def", "SIG=REDACTED&sig=REDACTED"},
		{"%73ig=abc&x=1", "%73ig=REDACTED&x=1"},
		{"signedidentifier=1&design=2&sig", "signedidentifier=1&design=2&sig"},
		{"a=sig%3Dx", "a=sig%3Dx"},
		{"s%69g=abc", "s%69g=REDACTED"},
	} {
		if got := server.MaskSignature(c.in); got != c.want {
			t.Errorf("MaskSignature(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { server.MaskSignature("$filter=PartitionKey%20eq%20'p'&$top=5") }); n != 0 {
		t.Errorf("masking a query without a signature allocates %v times", n)
	}
}

// TestObserversTellEach: a fan-out tells every observer the same thing.
func TestObserversTellEach(t *testing.T) {
	var a, b []server.RequestInfo
	var mu sync.Mutex
	obs := server.Observers{observerFunc(func(i server.RequestInfo) { mu.Lock(); a = append(a, i); mu.Unlock() }),
		observerFunc(func(i server.RequestInfo) { mu.Lock(); b = append(b, i); mu.Unlock() })}
	ts := startServer(t, &server.Options{Observer: obs})
	resp, _ := send(t, &http.Client{}, rawRequest(t, ts, "GET", "/Tables", nil, true))
	mu.Lock()
	defer mu.Unlock()
	if len(a) != 1 || len(b) != 1 || a[0] != b[0] || a[0].RequestID != resp.Header.Get("x-ms-request-id") || a[0].Operation != "QueryTables" {
		t.Fatalf("observers saw %+v and %+v", a, b)
	}
}

type observerFunc func(server.RequestInfo)

func (f observerFunc) RequestDone(i server.RequestInfo) { f(i) }
