package metrics_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/tabuladb/tabula/internal/metricstest"
	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/metrics"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/server"
	"github.com/tabuladb/tabula/server/auth"
	"github.com/tabuladb/tabula/vfs"
)

// stack is a store, a server on a loopback port counting into a Metrics,
// and the Metrics' own HTTP endpoint.
type stack struct {
	store   *partition.Store
	srv     *server.Server
	m       *metrics.Metrics
	connStr string
	health  *httptest.Server
	stopped bool
}

func startStack(t *testing.T, fs vfs.FS) *stack {
	t.Helper()
	store, err := partition.Open("/data", &partition.Options{LSM: lsm.Options{FS: fs}})
	if err != nil {
		t.Fatal(err)
	}
	st := &stack{store: store}
	st.m, err = metrics.New(metrics.Options{
		Store: func() *partition.Store { return store },
		Conns: func() server.ConnStats { return st.srv.ConnStats() },
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	st.srv = server.New(store, &server.Options{Observer: st.m})
	served := make(chan error, 1)
	go func() { served <- st.srv.Serve(ln) }()
	st.health = httptest.NewServer(st.m.Handler())
	st.connStr = "DefaultEndpointsProtocol=http;AccountName=" + auth.DevAccountName + ";AccountKey=" + auth.DevAccountKey +
		";TableEndpoint=http://" + ln.Addr().String() + "/" + auth.DevAccountName + ";"
	t.Cleanup(func() {
		st.health.Close()
		st.stop()
		<-served
	})
	return st
}

// stop shuts the server down and closes the store, once (a second
// Shutdown would wait forever).
func (st *stack) stop() {
	if st.stopped {
		return
	}
	st.stopped = true
	st.srv.Shutdown(context.Background())
	st.store.Close() // may fail: some tests break the disk
}

func (st *stack) client(t *testing.T, table string) *aztables.Client {
	t.Helper()
	svc, err := aztables.NewServiceClientFromConnectionString(st.connStr,
		&aztables.ClientOptions{ClientOptions: policy.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	return svc.NewClient(table)
}

func (st *stack) scrape(t *testing.T) metricstest.Families {
	t.Helper()
	f, err := metricstest.Scrape(st.health.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestEveryMetricIsServed: after a little work every family docs/metrics.md
// lists is in the scrape with its type, the engine's histograms among
// them, and the library's process and Go collectors too.
func TestEveryMetricIsServed(t *testing.T) {
	st := startStack(t, vfs.NewMem())
	c := st.client(t, "served")
	ctx := context.Background()
	if _, err := c.CreateTable(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"r"}`), nil); err != nil {
		t.Fatal(err)
	}
	f := st.scrape(t)
	want := map[string]string{
		"tabula_requests_total": "COUNTER", "tabula_request_duration_seconds": "HISTOGRAM",
		"tabula_request_body_bytes_total": "COUNTER", "tabula_response_body_bytes_total": "COUNTER",
		"tabula_connections_open": "GAUGE", "tabula_connections_accepted_total": "COUNTER", "tabula_connections_refused_total": "COUNTER",
		"tabula_lsm_memtable_bytes": "GAUGE", "tabula_lsm_memtables_immutable": "GAUGE",
		"tabula_lsm_level_files": "GAUGE", "tabula_lsm_level_bytes": "GAUGE", "tabula_lsm_level_score": "GAUGE",
		"tabula_lsm_compaction_debt_bytes": "GAUGE", "tabula_lsm_compactions_running": "GAUGE",
		"tabula_lsm_compactions_total": "COUNTER", "tabula_lsm_compaction_trivial_moves_total": "COUNTER",
		"tabula_lsm_compaction_read_bytes_total": "COUNTER", "tabula_lsm_compaction_written_bytes_total": "COUNTER",
		"tabula_lsm_compaction_seconds_total": "COUNTER", "tabula_lsm_flushes_total": "COUNTER",
		"tabula_lsm_flush_written_bytes_total": "COUNTER", "tabula_lsm_flush_seconds_total": "COUNTER",
		"tabula_lsm_write_stalls_total": "COUNTER", "tabula_lsm_write_stall_seconds_total": "COUNTER",
		"tabula_lsm_write_slowdowns_total": "COUNTER", "tabula_lsm_write_slowdown_seconds_total": "COUNTER",
		"tabula_lsm_write_memtable_paced_total": "COUNTER", "tabula_lsm_write_memtable_paced_seconds_total": "COUNTER",
		"tabula_lsm_block_cache_hits_total": "COUNTER", "tabula_lsm_block_cache_misses_total": "COUNTER",
		"tabula_lsm_block_cache_bytes": "GAUGE", "tabula_lsm_block_cache_mapped_bytes": "GAUGE", "tabula_lsm_table_cache_hits_total": "COUNTER",
		"tabula_lsm_table_cache_misses_total": "COUNTER", "tabula_lsm_table_cache_open": "GAUGE",
		"tabula_lsm_wal_files": "GAUGE", "tabula_lsm_wal_bytes": "GAUGE", "tabula_lsm_wal_written_bytes_total": "COUNTER",
		"tabula_lsm_wal_fsync_duration_seconds": "HISTOGRAM", "tabula_lsm_wal_group_commit_size": "HISTOGRAM",
		"tabula_lsm_snapshots": "GAUGE", "tabula_lsm_visible_seqnum": "GAUGE",
		"tabula_tables": "GAUGE", "tabula_ranges": "GAUGE", "tabula_range_splits_total": "COUNTER",
		"tabula_range_merges_total": "COUNTER", "tabula_latch_waits_total": "COUNTER", "tabula_latch_wait_seconds_total": "COUNTER",
		"process_cpu_seconds_total": "COUNTER", "process_resident_memory_bytes": "GAUGE",
		"go_goroutines": "GAUGE", "go_gc_duration_seconds": "SUMMARY",
	}
	for name, typ := range want {
		if got := f.Type(name); got != typ {
			t.Errorf("%s: type %q, want %q", name, got, typ)
		}
	}
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for name := range f {
		if strings.HasPrefix(name, "tabula_") && want[name] == "" {
			t.Errorf("%s is served but not listed here", name)
		}
	}
	for name := range want {
		if strings.HasPrefix(name, "tabula_") && !strings.Contains(string(doc), "| `"+name+"` | "+strings.ToLower(want[name])+" |") {
			t.Errorf("docs/metrics.md has no row for %s, a %s", name, strings.ToLower(want[name]))
		}
	}
	if f.Sum("tabula_lsm_level_files") != 0 || !f.Has("tabula_lsm_level_bytes", "level", "6") {
		t.Errorf("levels of a store that never flushed: files %v", f.Sum("tabula_lsm_level_files"))
	}
	// The table's creation and the insert: two synced writes, each alone
	// in its fsync (the store's own writes at open came before).
	if g, ok := f.Histogram("tabula_lsm_wal_group_commit_size"); !ok || g.GetSampleCount() < 2 || g.GetSampleSum() < 2 {
		t.Errorf("group commit histogram %v", g)
	}
	if f.Sum("tabula_tables") != 1 || f.Sum("tabula_ranges") != 1 || f.Sum("tabula_connections_open") < 1 {
		t.Errorf("tables %v, ranges %v, open connections %v", f.Sum("tabula_tables"), f.Sum("tabula_ranges"), f.Sum("tabula_connections_open"))
	}
}

// TestRegistriesAreSeparate: two Metrics in one process count only their
// own server's requests.
func TestRegistriesAreSeparate(t *testing.T) {
	a, b := startStack(t, vfs.NewMem()), startStack(t, vfs.NewMem())
	ctx := context.Background()
	for range 3 {
		a.client(t, "tablea").CreateTable(ctx, nil) // the 2nd and 3rd: 409
	}
	if _, err := b.client(t, "tableb").CreateTable(ctx, nil); err != nil {
		t.Fatal(err)
	}
	fa, fb := a.scrape(t), b.scrape(t)
	if n := fa.Sum("tabula_requests_total", "operation", "CreateTable"); n != 3 {
		t.Errorf("server a counted %v table creations, want 3", n)
	}
	if n := fa.Sum("tabula_requests_total", "operation", "CreateTable", "status", "409", "code", "TableAlreadyExists"); n != 2 {
		t.Errorf("server a counted %v refused creations, want 2", n)
	}
	if n := fb.Sum("tabula_requests_total", "operation", "CreateTable"); n != 1 {
		t.Errorf("server b counted %v table creations, want 1", n)
	}
}

// TestHealthAndReadiness: /healthz answers while the process runs;
// /readyz is ready on a healthy store, not once its disk has failed a
// write, and not once the store is closed.
func TestHealthAndReadiness(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.NewMem(), 1)
	st := startStack(t, efs)
	c := st.client(t, "ready")
	ctx := context.Background()
	if _, err := c.CreateTable(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, st.health.URL+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if code, body := get(t, st.health.URL+"/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Fatalf("/readyz on a healthy store: %d %q", code, body)
	}

	efs.Inject(vfs.Fault{Op: vfs.OpSync, Match: ".log", Sticky: true})
	_, err := c.AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"r"}`), nil)
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusInternalServerError {
		t.Fatalf("a write on a failed disk: %v", err)
	}
	code, body := get(t, st.health.URL+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "takes no writes") {
		t.Fatalf("/readyz after the disk failed: %d %q", code, body)
	}
	if code, _ := get(t, st.health.URL+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz after the disk failed: %d (the process is up)", code)
	}
	f := st.scrape(t)
	if n := f.Sum("tabula_requests_total", "operation", "InsertEntity", "status", "500", "code", "InternalError"); n != 1 {
		t.Errorf("the failed insert counted %v times as a 500", n)
	}

	st.stop()
	if code, body := get(t, st.health.URL+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "closed") {
		t.Fatalf("/readyz after Close: %d %q", code, body)
	}
	// A closed engine still reports its last state rather than failing
	// the scrape.
	if f := st.scrape(t); !f.Has("tabula_lsm_memtable_bytes") {
		t.Error("no engine metrics after Close")
	}
}

// TestReadyConsultsOptions: Options.Ready's refusal makes /readyz refuse
// too, with its reason.
func TestReadyConsultsOptions(t *testing.T) {
	draining := errors.New("shutting down")
	m, err := metrics.New(metrics.Options{Ready: func() error { return draining }})
	if err != nil {
		t.Fatal(err)
	}
	h := httptest.NewServer(m.Handler())
	defer h.Close()
	if code, body := get(t, h.URL+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "shutting down") {
		t.Fatalf("/readyz: %d %q", code, body)
	}
	if code, _ := get(t, h.URL+"/metrics"); code != http.StatusOK {
		t.Fatalf("/metrics without a store: %d", code)
	}
	if code, _ := get(t, h.URL+"/nothing"); code != http.StatusNotFound {
		t.Fatalf("an unknown path: %d", code)
	}
}
