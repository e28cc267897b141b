package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/tabuladb/tabula/internal/metricstest"
)

// accessLine is one JSON line of serve's log: the access log's fields
// and the few other records' own.
type accessLine struct {
	Level           string  `json:"level"`
	Msg             string  `json:"msg"`
	Method          string  `json:"method"`
	Account         string  `json:"account"`
	Table           string  `json:"table"`
	Operation       string  `json:"operation"`
	Status          int     `json:"status"`
	ErrorCode       string  `json:"error_code"`
	DurationMS      float64 `json:"duration_ms"`
	BytesIn         int64   `json:"bytes_in"`
	BytesOut        int64   `json:"bytes_out"`
	RequestID       string  `json:"request_id"`
	ClientRequestID string  `json:"client_request_id"`
	Path            string  `json:"path"`
	Query           string  `json:"query"`
	Remote          string  `json:"remote"`
}

// accessLines parses every line of a --log-format json log, and returns
// the access log's ("request") records.
func accessLines(t *testing.T, log string) []accessLine {
	t.Helper()
	var out []accessLine
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		var raw map[string]any
		if err := json.Unmarshal(sc.Bytes(), &raw); err != nil {
			t.Fatalf("a log line that is not JSON: %q: %v", sc.Text(), err)
		}
		if raw["msg"] != "request" {
			continue
		}
		for _, k := range []string{"time", "level", "msg", "method", "account", "table", "operation", "status", "error_code",
			"duration_ms", "bytes_in", "bytes_out", "request_id", "client_request_id", "path", "query", "remote"} {
			if _, ok := raw[k]; !ok {
				t.Errorf("access log line without %q: %s", k, sc.Text())
			}
		}
		if len(raw) != 17 {
			t.Errorf("access log line with %d fields, want 17: %s", len(raw), sc.Text())
		}
		var l accessLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// headerRecorder is an SDK transport that remembers the Authorization
// headers the client sent (to look for them in the server's log).
type headerRecorder struct {
	mu   sync.Mutex
	auth []string
	ids  []string // x-ms-client-request-id
}

func (h *headerRecorder) Do(req *http.Request) (*http.Response, error) {
	h.mu.Lock()
	h.auth = append(h.auth, req.Header.Get("Authorization"))
	h.ids = append(h.ids, req.Header.Get("x-ms-client-request-id"))
	h.mu.Unlock()
	return http.DefaultClient.Do(req)
}

// TestServeMetricsAndAccessLog runs a real server with --metrics-addr and
// a JSON log, drives a workload through the SDK and checks that every
// counter moved by exactly what the workload did, that the access log
// has a line with every field for each request and agrees with the
// metrics on bytes, and that the health checks answer.
func TestServeMetricsAndAccessLog(t *testing.T) {
	metricsAddr := freeAddrs(t, 1)[0]
	p := startServe(t, "--addr", "127.0.0.1:0", "--data", filepath.Join(t.TempDir(), "data"),
		"--metrics-addr", metricsAddr, "--log-format", "json")
	base := "http://" + metricsAddr
	for _, c := range []struct{ path, body string }{{"/healthz", "ok\n"}, {"/readyz", "ready\n"}} {
		resp, err := http.Get(base + c.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != c.body {
			t.Fatalf("%s: %d %q", c.path, resp.StatusCode, body)
		}
	}
	before, err := metricstest.Scrape(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}

	rec := &headerRecorder{}
	svc, err := aztables.NewServiceClientFromConnectionString(p.connStr, &aztables.ClientOptions{ClientOptions: policy.ClientOptions{
		Retry: policy.RetryOptions{MaxRetries: -1}, Transport: rec}})
	if err != nil {
		t.Fatal(err)
	}
	c := svc.NewClient("watched")
	ctx := context.Background()
	if _, err := c.CreateTable(ctx, nil); err != nil {
		t.Fatal(err)
	}
	const inserts, misses = 25, 3
	for i := range inserts {
		// The SDK sends no x-ms-client-request-id of its own.
		ictx := policy.WithHTTPHeader(ctx, http.Header{"X-Ms-Client-Request-Id": {fmt.Sprintf("insert-%d", i)}})
		if _, err := c.AddEntity(ictx, entityJSON("p", fmt.Sprintf("r%03d", i), i), nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range misses {
		_, err := c.GetEntity(ctx, "p", fmt.Sprintf("missing%d", i), nil)
		var re *azcore.ResponseError
		if !errors.As(err, &re) || re.StatusCode != http.StatusNotFound {
			t.Fatalf("a missing entity: %v", err)
		}
	}
	pager := c.NewListEntitiesPager(nil)
	listed := 0
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		listed += len(page.Entities)
	}
	if listed != inserts {
		t.Fatalf("listed %d entities, inserted %d", listed, inserts)
	}

	after, err := metricstest.Scrape(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	delta := func(name string, labels ...string) float64 {
		return after.Sum(name, labels...) - before.Sum(name, labels...)
	}
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"operation", "CreateTable", "status", "201", "code", ""}, 1},
		{[]string{"operation", "InsertEntity", "status", "201", "code", ""}, inserts},
		{[]string{"operation", "GetEntity", "status", "404", "code", "ResourceNotFound"}, misses},
		{[]string{"operation", "QueryEntities", "status", "200", "code", ""}, 1},
		{nil, 1 + inserts + misses + 1},
	} {
		if got := delta("tabula_requests_total", c.labels...); got != c.want {
			t.Errorf("tabula_requests_total%v moved by %v, want %v", c.labels, got, c.want)
		}
	}
	if got := delta("tabula_request_duration_seconds", "operation", "InsertEntity"); got != inserts {
		t.Errorf("the insert latency histogram counted %v, want %d", got, inserts)
	}
	if got := after.Sum("tabula_tables"); got != 1 {
		t.Errorf("tabula_tables %v", got)
	}
	if got := after.Sum("tabula_ranges"); got < 1 {
		t.Errorf("tabula_ranges %v", got)
	}
	// Each synced write is an fsync of its own (one client, one write at
	// a time): at least one commit group per insert, and the WAL grows.
	if got := delta("tabula_lsm_wal_group_commit_size"); got < inserts {
		t.Errorf("%v commit groups for %d inserts", got, inserts)
	}
	if got := delta("tabula_lsm_wal_fsync_duration_seconds"); got < inserts {
		t.Errorf("%v WAL fsyncs timed for %d inserts", got, inserts)
	}
	if got := delta("tabula_lsm_visible_seqnum"); got < inserts {
		t.Errorf("the visible sequence number moved by %v for %d inserts", got, inserts)
	}
	if got := delta("tabula_lsm_wal_written_bytes_total"); got < inserts*20 {
		t.Errorf("the WAL grew by %v bytes for %d inserts", got, inserts)
	}
	if got := after.Sum("tabula_connections_open"); got < 1 {
		t.Errorf("%v connections open with the SDK's keep-alive one", got)
	}
	if got := after.Sum("tabula_connections_accepted_total"); got < 1 {
		t.Errorf("%v connections accepted", got)
	}
	if !after.Has("process_resident_memory_bytes") || !after.Has("go_goroutines") {
		t.Error("no process or Go runtime metrics")
	}

	// The access log: one line per request, every field, agreeing with
	// the client and with the metrics.
	lines := accessLines(t, p.stderr.String())
	if len(lines) != 1+inserts+misses+1 {
		t.Fatalf("%d access log lines for %d requests:\n%s", len(lines), 1+inserts+misses+1, p.stderr)
	}
	ids := map[string]bool{}
	var in, out int64
	rec.mu.Lock()
	clientIDs := map[string]bool{}
	for _, id := range rec.ids {
		clientIDs[id] = true
	}
	rec.mu.Unlock()
	for _, l := range lines {
		if l.Level != "INFO" || l.Method == "" || l.Account != "devstoreaccount1" || l.Operation == "" || l.Status == 0 ||
			l.DurationMS <= 0 || l.RequestID == "" || ids[l.RequestID] || !clientIDs[l.ClientRequestID] ||
			!strings.HasPrefix(l.Path, "/devstoreaccount1/") || !strings.HasPrefix(l.Remote, "127.0.0.1:") {
			t.Errorf("access log line %+v", l)
		}
		ids[l.RequestID] = true
		if l.Operation == "InsertEntity" {
			if l.Table != "watched" || l.Method != "POST" || l.Status != 201 || l.ErrorCode != "" || l.BytesIn == 0 ||
				!strings.HasPrefix(l.ClientRequestID, "insert-") {
				t.Errorf("insert line %+v", l)
			}
			in += l.BytesIn
			out += l.BytesOut
		}
		if l.Operation == "GetEntity" && (l.Status != 404 || l.ErrorCode != "ResourceNotFound" || l.BytesOut == 0) {
			t.Errorf("missing entity line %+v", l)
		}
	}
	if got := delta("tabula_request_body_bytes_total", "operation", "InsertEntity"); got != float64(in) {
		t.Errorf("request body bytes of the inserts: metrics %v, access log %d", got, in)
	}
	if got := delta("tabula_response_body_bytes_total", "operation", "InsertEntity"); got != float64(out) {
		t.Errorf("response body bytes of the inserts: metrics %v, access log %d", got, out)
	}
	if got := delta("tabula_response_body_bytes_total", "operation", "GetEntity"); got == 0 {
		t.Error("the 404s' error bodies are not counted")
	}

	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d: %s", code, p.stderr)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("the metrics address still answers after the process exited")
	}
}

// TestServeLogHoldsNoSecret runs a real server with a custom account at
// debug level in both formats, and sends it requests signed with Shared
// Key (through the SDK), with a SAS, and with a forged SAS: the key, the
// Authorization headers and the signatures never reach the log, and the
// SAS requests are logged with sig=REDACTED.
func TestServeLogHoldsNoSecret(t *testing.T) {
	const key = "bm90LWEtcmVhbC1rZXktYnV0LWEtc2VjcmV0LW9uZQ=="
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			p := startServe(t, "--addr", "127.0.0.1:0", "--data", t.TempDir(), "--accounts", "secretacct:"+key,
				"--log-level", "debug", "--log-format", format, "--slow-request", "1ns")
			endpoint := p.connStr[strings.Index(p.connStr, "TableEndpoint=")+len("TableEndpoint="):]
			endpoint = strings.TrimSuffix(endpoint, ";")
			conn := "DefaultEndpointsProtocol=http;AccountName=secretacct;AccountKey=" + key + ";TableEndpoint=" + endpoint + ";"
			rec := &headerRecorder{}
			svc, err := aztables.NewServiceClientFromConnectionString(conn, &aztables.ClientOptions{ClientOptions: policy.ClientOptions{
				Retry: policy.RetryOptions{MaxRetries: -1}, Transport: rec}})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			c := svc.NewClient("guarded")
			if _, err := c.CreateTable(ctx, nil); err != nil {
				t.Fatal(err)
			}
			sasURL, err := c.GetTableSASURL(aztables.SASPermissions{Read: true, Add: true}, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			// The SDK joins a path-style endpoint and the table without a
			// slash (aztables v1.4.0): the table's URL is rebuilt here.
			u, err := url.Parse(sasURL)
			if err != nil {
				t.Fatal(err)
			}
			u, err = url.Parse(endpoint + "/guarded?" + u.RawQuery)
			if err != nil {
				t.Fatal(err)
			}
			sasURL = u.String()
			sig := u.Query().Get("sig")
			if sig == "" {
				t.Fatalf("no sig in %s", sasURL)
			}
			sasClient, err := aztables.NewClientWithNoCredential(sasURL, &aztables.ClientOptions{ClientOptions: policy.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sasClient.AddEntity(ctx, entityJSON("p", "r", 1), nil); err != nil {
				t.Fatalf("insert with a SAS: %v", err)
			}
			forgedSig := "Zm9yZ2VkLXNpZ25hdHVyZS1mb3ItdGhlLXRlc3QtMDE="
			q := u.Query()
			q.Set("sig", forgedSig)
			u.RawQuery = q.Encode()
			forged, err := aztables.NewClientWithNoCredential(u.String(), &aztables.ClientOptions{ClientOptions: policy.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := forged.GetEntity(ctx, "p", "r", nil); err == nil {
				t.Fatal("a forged SAS was accepted")
			}

			p.cmd.Process.Signal(syscall.SIGTERM)
			if code := p.wait(t); code != 0 {
				t.Fatalf("exit %d: %s", code, p.stderr)
			}
			log := p.stderr.String()
			secrets := []string{key, sig, url.QueryEscape(sig), forgedSig, url.QueryEscape(forgedSig)}
			rec.mu.Lock()
			for _, a := range rec.auth {
				if a == "" {
					t.Fatal("an SDK request went without an Authorization header")
				}
				secrets = append(secrets, a, a[strings.LastIndex(a, ":")+1:])
			}
			rec.mu.Unlock()
			for _, s := range secrets {
				if strings.Contains(log, s) {
					t.Errorf("the log holds the secret %q:\n%s", s, log)
				}
			}
			if n := strings.Count(log, "sig=REDACTED"); n != 2*2 { // two SAS requests, each a request and a slow request line
				t.Errorf("%d masked signatures in the log, want 4:\n%s", n, log)
			}
		})
	}
}

// TestServeSlowRequests: at --log-level warn the access log writes only
// the requests slower than --slow-request, here the gets that --faults
// delays.
func TestServeSlowRequests(t *testing.T) {
	p := startServe(t, "--addr", "127.0.0.1:0", "--data", t.TempDir(), "--log-level", "warn", "--log-format", "json",
		"--slow-request", "100ms", "--faults", "get:latency=150ms")
	c := tableClient(t, p.connStr, "slow")
	ctx := context.Background()
	if _, err := c.CreateTable(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddEntity(ctx, entityJSON("p", "r", 1), nil); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := c.GetEntity(ctx, "p", "r", nil); err != nil {
			t.Fatal(err)
		}
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d: %s", code, p.stderr)
	}
	var slow int
	sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
	for sc.Scan() {
		var l struct {
			accessLine
			ThresholdMS float64 `json:"threshold_ms"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		switch l.Msg {
		case "request":
			t.Errorf("an info access line at --log-level warn: %s", sc.Text())
		case "slow request":
			slow++
			if l.Level != "WARN" || l.Operation != "GetEntity" || l.Status != 200 || l.DurationMS < 150 || l.ThresholdMS != 100 {
				t.Errorf("slow request line %s", sc.Text())
			}
		}
	}
	if slow != 2 {
		t.Errorf("%d slow request lines, want the 2 delayed gets:\n%s", slow, p.stderr)
	}
}

// TestServeObserveFlags: bad values of the new flags are refused before
// anything starts, and a --metrics-addr that cannot be bound stops the
// start.
func TestServeObserveFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"serve", "--log-format", "xml"}, 2, "--log-format"},
		{[]string{"serve", "--slow-request", "-1s"}, 2, "--slow-request"},
		{[]string{"serve", "--slow-request", "soon"}, 2, "slow-request"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(c.args, &stdout, &stderr); code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, stderr.String(), c.code, c.want)
		}
	}
	_, err := spawnServe("--addr", "127.0.0.1:0", "--data", t.TempDir(), "--metrics-addr", "127.0.0.1:notaport")
	if err == nil || !strings.Contains(err.Error(), "--metrics-addr") {
		t.Fatalf("an unusable --metrics-addr: %v", err)
	}
}

// TestServeMetricsInACluster: a node started with --join serves the
// metrics of its replica: requests, and the engine and tables of the
// store the cluster writes.
func TestServeMetricsInACluster(t *testing.T) {
	addrs := freeAddrs(t, 3)
	c := &procCluster{t: t, nodeAddrs: addrs[:1], restAddrs: addrs[1:2], join: addrs[0],
		dirs: []string{filepath.Join(t.TempDir(), "n1")}, procs: make([]*serverProcess, 1)}
	c.procs[0] = startServe(t, append(c.args(0, testSecret), "--metrics-addr", addrs[2])...)
	c.leader()
	tc := c.client(0, "clustered")
	ctx := context.Background()
	if _, err := tc.CreateTable(ctx, nil); err != nil {
		t.Fatal(err)
	}
	const inserts = 10
	for i := range inserts {
		if _, err := tc.AddEntity(ctx, entityJSON("p", fmt.Sprint(i), i), nil); err != nil {
			t.Fatal(err)
		}
	}
	f, err := metricstest.Scrape("http://" + addrs[2] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Sum("tabula_requests_total", "operation", "InsertEntity", "status", "201"); got != inserts {
		t.Errorf("%v inserts counted, want %d", got, inserts)
	}
	if got := f.Sum("tabula_tables"); got != 1 {
		t.Errorf("tabula_tables %v: the replica's table is not reported", got)
	}
	if got := f.Sum("tabula_lsm_visible_seqnum"); got < inserts {
		t.Errorf("the replica's engine is at sequence number %v after %d inserts", got, inserts)
	}
	resp, err := http.Get("http://" + addrs[2] + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz of a cluster node: %d", resp.StatusCode)
	}
}
