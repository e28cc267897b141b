package main

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The REST suite's -emulate-limits phase: Tabula serves with the
// service's throughput limits emulated (`serve --emulate-limits`), one
// hot partition takes single inserts as fast as its writers can send
// them, and scattered partitions take batches of 100. The hot partition
// should be held at the partition limit and the account as a whole at
// the account limit; the phase measures both, second by second.

// limitsSecond is one second of the limits phase: entities served and
// refused (503 ServerBusy), for the hot partition and the scattered ones.
type limitsSecond struct {
	Hot              int64 `json:"hot"`
	HotRefused       int64 `json:"hot_refused"`
	Scattered        int64 `json:"scattered"`
	ScatteredRefused int64 `json:"scattered_refused"`
}

// limitsReport is the limits phase's result.
type limitsReport struct {
	PartitionLimit float64        `json:"partition_limit"`
	AccountLimit   float64        `json:"account_limit"`
	Timeline       []limitsSecond `json:"timeline"`
	// Steady rates (entities/s over the timeline without its first
	// second, when the buckets start full) and their ratios to the
	// limits.
	HotRate      num    `json:"hot_rate"`
	AccountRate  num    `json:"account_rate"`
	HotRatio     num    `json:"hot_ratio"`
	AccountRatio num    `json:"account_ratio"`
	Errors       int64  `json:"errors"` // answers that were neither served nor ServerBusy
	FirstError   string `json:"first_error,omitempty"`
	Error        string `json:"error,omitempty"`
}

// limitsTolerance is how far from a limit a held rate may be.
const limitsTolerance = 0.10

// scatteredPartitions is how many partitions the scattered writers
// spread their batches over: enough that none nears its own limit.
const scatteredPartitions = 200

// refusalBackoff is about how long a writer waits after a 503.
const refusalBackoff = 50 * time.Millisecond

// limitsPhase runs the limits phase on the tabula binary bin for secs
// seconds with conns writers on each side.
func limitsPhase(bin, tmp string, partitionRate, accountRate float64, secs, conns int) limitsReport {
	out := limitsReport{PartitionLimit: partitionRate, AccountLimit: accountRate}
	kind := tabulaKind("tabula-limits", bin, []string{"--emulate-limits",
		"--partition-rate", fmt.Sprint(partitionRate), "--account-rate", fmt.Sprint(accountRate)})
	dir, err := os.MkdirTemp(tmp, "limits-")
	if err != nil {
		out.Error = err.Error()
		return out
	}
	defer os.RemoveAll(dir)
	srv, err := startServer(kind, dir)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	defer srv.stop()
	c := newTableClient(srv.endpoint, 2*conns)
	if r, err := c.do("POST", "/Tables", "application/json", []byte(`{"TableName":"limits"}`)); err != nil || !r.ok() {
		out.Error = fmt.Sprintf("create table: %v %d %s", err, r.status, r.body)
		return out
	}
	var (
		mu       sync.Mutex
		timeline = make([]limitsSecond, secs)
		errs     atomic.Int64
		firstErr atomic.Value
		seq      atomic.Int64
		wg       sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(time.Duration(secs) * time.Second)
	// record counts one answer of n entities in the second it came, and
	// after a refusal waits as a client's retry policy would (briefly:
	// the phase measures the limit, not a policy), so that refused
	// writers do not take the CPU the served ones need.
	record := func(hot bool, n int, r response, err error) {
		refused := err == nil && !r.ok() && bytes.Contains(r.body, []byte("ServerBusy"))
		if refused {
			defer time.Sleep(refusalBackoff/2 + rand.N(refusalBackoff))
		}
		if err != nil || (!r.ok() && !refused) {
			errs.Add(1)
			if err == nil {
				err = fmt.Errorf("%d %s", r.status, r.body)
			}
			firstErr.CompareAndSwap(nil, err.Error())
			return
		}
		sec := int(time.Since(start) / time.Second)
		if sec >= secs {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		s := &timeline[sec]
		switch {
		case hot && refused:
			s.HotRefused += int64(n)
		case hot:
			s.Hot += int64(n)
		case refused:
			s.ScatteredRefused += int64(n)
		default:
			s.Scattered += int64(n)
		}
	}
	for range conns {
		wg.Go(func() {
			for time.Now().Before(end) {
				n := seq.Add(1)
				r, err := c.do("POST", "/limits", "application/json", benchEntityJSON("hot", fmt.Sprintf("r%09d", n), int(n)), "Prefer", "return-no-content")
				record(true, 1, r, err)
			}
		})
		wg.Go(func() {
			rks := make([]string, 100)
			for time.Now().Before(end) {
				n := seq.Add(1)
				for j := range rks {
					rks[j] = fmt.Sprintf("b%09d-%03d", n, j)
				}
				pk := fmt.Sprintf("s%03d", rand.IntN(scatteredPartitions))
				ct, body := batchBody(c.endpoint, "limits", pk, rks, int(n))
				r, err := c.do("POST", "/$batch", ct, body)
				record(false, len(rks), r, err)
			}
		})
	}
	wg.Wait()
	out.Timeline = timeline
	out.Errors = errs.Load()
	if v := firstErr.Load(); v != nil {
		out.FirstError = v.(string)
	}
	var hot, all float64
	steady := timeline[min(1, len(timeline)-1):]
	for _, s := range steady {
		hot += float64(s.Hot)
		all += float64(s.Hot + s.Scattered)
	}
	out.HotRate, out.AccountRate = num(hot/float64(len(steady))), num(all/float64(len(steady)))
	out.HotRatio, out.AccountRatio = num(float64(out.HotRate)/partitionRate), num(float64(out.AccountRate)/accountRate)
	return out
}

// held reports whether the phase held both rates within limitsTolerance
// of their limits.
func (lr *limitsReport) held() bool {
	return math.Abs(float64(lr.HotRatio)-1) <= limitsTolerance && math.Abs(float64(lr.AccountRatio)-1) <= limitsTolerance
}

// failures lists what went wrong, for the suite's verdict.
func (lr *limitsReport) failures() []string {
	switch {
	case lr == nil:
		return nil
	case lr.Error != "":
		return []string{"limits: " + lr.Error}
	case lr.Errors > 0:
		return []string{fmt.Sprintf("limits: %d answers neither served nor ServerBusy; the first: %s", lr.Errors, lr.FirstError)}
	case !lr.held():
		return []string{fmt.Sprintf("limits: the hot partition ran at %.2f of its limit and the account at %.2f of its, beyond ±%.0f%%",
			float64(lr.HotRatio), float64(lr.AccountRatio), 100*limitsTolerance)}
	}
	return nil
}

// write adds the phase's section to a report.
func (lr *limitsReport) write(b *strings.Builder, chartPrefix string) {
	if lr == nil {
		return
	}
	fmt.Fprintf(b, "\n### Emulated limits: one hot partition beside scattered ones (`serve --emulate-limits`)\n\n")
	if lr.Error != "" {
		fmt.Fprintf(b, "Failed: %s\n", lr.Error)
		return
	}
	fmt.Fprintf(b, "Limits: %s entities/s a partition, %s an account. Writers send single inserts to one partition and batches of 100 to %d others as fast as they are answered, waiting 25 to 75 ms after a refusal (a 503 ServerBusy). Rates are over the seconds after the first (the buckets start full).\n\n",
		fmtOps(lr.PartitionLimit), fmtOps(lr.AccountLimit), scatteredPartitions)
	fmt.Fprintf(b, "| | served entities/s | limit | ratio |\n|---|---:|---:|---:|\n")
	fmt.Fprintf(b, "| hot partition | %s | %s | **%s** |\n", fmtOps(float64(lr.HotRate)), fmtOps(lr.PartitionLimit), fmtRatio(lr.HotRatio))
	fmt.Fprintf(b, "| account (hot + scattered) | %s | %s | **%s** |\n", fmtOps(float64(lr.AccountRate)), fmtOps(lr.AccountLimit), fmtRatio(lr.AccountRatio))
	verdict := "both held within ±10%"
	if !lr.held() {
		verdict = "**not held within ±10%**"
	}
	fmt.Fprintf(b, "\n%s; %d other failures.\n\n| second | hot served | hot refused | scattered served | scattered refused |\n|---:|---:|---:|---:|---:|\n", verdict, lr.Errors)
	for i, s := range lr.Timeline {
		fmt.Fprintf(b, "| %d | %d | %d | %d | %d |\n", i+1, s.Hot, s.HotRefused, s.Scattered, s.ScatteredRefused)
	}
	fmt.Fprintf(b, "\n![emulated limits](%slimits.svg)\n", chartPrefix)
}

// chart is the timeline as a bar chart: served entities per second of the
// hot partition and of the account, against their limits.
func (lr *limitsReport) chart() barChart {
	c := barChart{Title: "emulated limits: entities served per second", Unit: "entities/s",
		Series: []string{"hot partition", "partition limit", "account", "account limit"}}
	for i, s := range lr.Timeline {
		c.Category = append(c.Category, fmt.Sprintf("s%d", i+1))
		c.Values = append(c.Values, []float64{float64(s.Hot), lr.PartitionLimit, float64(s.Hot + s.Scattered), lr.AccountLimit})
	}
	return c
}
