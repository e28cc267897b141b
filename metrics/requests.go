package metrics

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tabuladb/tabula/server"
)

// unknownOperation labels the requests refused before the server knew
// their operation (server.RequestInfo.Operation "").
const unknownOperation = "Unknown"

// durationBuckets are the request latency histogram's upper bounds, in
// seconds: from a cached point read (tens of microseconds) to a page
// that ran into its time budget (5 s).
var durationBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// requestMetrics counts answered requests: by operation, status and
// error code; their latency and body bytes by operation.
type requestMetrics struct {
	total    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	bytesIn  *prometheus.CounterVec
	bytesOut *prometheus.CounterVec

	// series caches the resolved metrics of each (operation, status,
	// code) seen, so counting a request is one map lookup and four atomic
	// adds rather than four label hashes; a handful of operations times
	// outcomes bounds it.
	mu     sync.RWMutex
	series map[seriesKey]*requestSeries
}

type seriesKey struct {
	op, code string
	status   int
}

type requestSeries struct {
	total             prometheus.Counter
	duration          prometheus.Observer
	bytesIn, bytesOut prometheus.Counter
}

func newRequestMetrics() *requestMetrics {
	return &requestMetrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "requests_total",
			Help: "Requests answered, by operation, HTTP status and x-ms-error-code (\"\" for none; status 0: the connection was reset, nothing answered).",
		}, []string{"operation", "status", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "request_duration_seconds",
			Help:    "Time from a request's arrival at the handler to its response handed to the connection, by operation.",
			Buckets: durationBuckets,
		}, []string{"operation"}),
		bytesIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "request_body_bytes_total",
			Help: "Request body bytes read, by operation.",
		}, []string{"operation"}),
		bytesOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "response_body_bytes_total",
			Help: "Response body bytes written, by operation.",
		}, []string{"operation"}),
		series: make(map[seriesKey]*requestSeries),
	}
}

// observe counts one answered request.
func (r *requestMetrics) observe(info *server.RequestInfo) {
	s := r.seriesOf(seriesKey{op: info.Operation, code: info.ErrorCode, status: info.Status})
	s.total.Inc()
	s.duration.Observe(info.Duration.Seconds())
	s.bytesIn.Add(float64(info.BytesIn))
	s.bytesOut.Add(float64(info.BytesOut))
}

func (r *requestMetrics) seriesOf(k seriesKey) *requestSeries {
	r.mu.RLock()
	s := r.series[k]
	r.mu.RUnlock()
	if s != nil {
		return s
	}
	op := k.op
	if op == "" {
		op = unknownOperation
	}
	s = &requestSeries{
		total:    r.total.WithLabelValues(op, strconv.Itoa(k.status), k.code),
		duration: r.duration.WithLabelValues(op),
		bytesIn:  r.bytesIn.WithLabelValues(op),
		bytesOut: r.bytesOut.WithLabelValues(op),
	}
	r.mu.Lock()
	r.series[k] = s
	r.mu.Unlock()
	return s
}

// Describe and Collect make requestMetrics one collector of its four
// vectors.
func (r *requestMetrics) Describe(ch chan<- *prometheus.Desc) {
	r.total.Describe(ch)
	r.duration.Describe(ch)
	r.bytesIn.Describe(ch)
	r.bytesOut.Describe(ch)
}

func (r *requestMetrics) Collect(ch chan<- prometheus.Metric) {
	r.total.Collect(ch)
	r.duration.Collect(ch)
	r.bytesIn.Collect(ch)
	r.bytesOut.Collect(ch)
}
