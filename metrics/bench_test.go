package metrics_test

import (
	"testing"
	"time"

	"github.com/tabuladb/tabula/metrics"
	"github.com/tabuladb/tabula/server"
)

// BenchmarkRequestDone is what counting one request costs the request:
// an already seen (operation, status, code) after the first.
func BenchmarkRequestDone(b *testing.B) {
	m, err := metrics.New(metrics.Options{})
	if err != nil {
		b.Fatal(err)
	}
	info := server.RequestInfo{Method: "GET", Operation: "GetEntity", Status: 200, Duration: 150 * time.Microsecond,
		BytesOut: 230, RequestID: "b8a9d00e-b715-0fcf-a72d-acad892f79a9"}
	b.ReportAllocs()
	for b.Loop() {
		m.RequestDone(info)
	}
}
