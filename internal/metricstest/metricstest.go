// Package metricstest scrapes a Prometheus endpoint for tests and reads
// the samples, parsed with Prometheus' own text parser, by name and
// labels.
package metricstest

import (
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families are the metric families of one scrape, by name.
type Families map[string]*dto.MetricFamily

// Scrape GETs url (a /metrics endpoint) and parses its text format.
func Scrape(url string) (Families, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, fmt.Errorf("metricstest: scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("metricstest: scrape %s: %s: %s", url, resp.Status, body)
	}
	return Parse(resp.Body)
}

// Parse reads Prometheus' text format.
func Parse(r io.Reader) (Families, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("metricstest: parse: %w", err)
	}
	return fams, nil
}

// matching returns the series of family name whose labels include every
// name, value pair of labels.
func (f Families) matching(name string, labels []string) []*dto.Metric {
	fam := f[name]
	if fam == nil {
		return nil
	}
	var out []*dto.Metric
	for _, m := range fam.GetMetric() {
		if hasLabels(m, labels) {
			out = append(out, m)
		}
	}
	return out
}

func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// value is a counter's, gauge's or untyped sample's value, or a
// histogram's sample count.
func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return m.GetUntyped().GetValue()
}

// Sum adds up the series of family name whose labels include labels
// (name, value pairs): a counter's or gauge's values, a histogram's
// sample counts. A family with no such series sums to 0.
func (f Families) Sum(name string, labels ...string) float64 {
	var sum float64
	for _, m := range f.matching(name, labels) {
		sum += value(m)
	}
	return sum
}

// Has reports whether family name has a series with labels.
func (f Families) Has(name string, labels ...string) bool {
	return len(f.matching(name, labels)) > 0
}

// Type is the type of family name, or "" if the scrape has none.
func (f Families) Type(name string) string {
	if fam := f[name]; fam != nil {
		return fam.GetType().String()
	}
	return ""
}

// Histogram returns the histogram of family name with labels, if exactly
// one series matches.
func (f Families) Histogram(name string, labels ...string) (*dto.Histogram, bool) {
	ms := f.matching(name, labels)
	if len(ms) != 1 || ms[0].Histogram == nil {
		return nil, false
	}
	return ms[0].GetHistogram(), true
}
