package server

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// fakeClock drives a limiter's time by hand.
type fakeClock struct{ t time.Duration }

func testLimiter(l Limits) (*limiter, *fakeClock) {
	lm := newLimiter(l)
	c := &fakeClock{}
	lm.now = func() time.Duration { return c.t }
	return lm, c
}

// TestLimiterBuckets checks the token buckets' arithmetic: the burst, the
// refill at the rate, a batch's cost, and that a refused request takes
// nothing.
func TestLimiterBuckets(t *testing.T) {
	lm, clock := testLimiter(Limits{PartitionRate: 1000, AccountRate: 1e6, Burst: 200 * time.Millisecond})
	// The burst is 200 entities: two batches of 100 pass, a third does not.
	for i := range 2 {
		if err := lm.take("acct", "T", "p", 100, true); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	if err := lm.take("acct", "t", "p", 100, true); err != errPartitionBusy {
		t.Fatalf("third batch: %v, want the partition's refusal", err)
	}
	// Another partition, and the same table in another case, are apart
	// and the same respectively.
	if err := lm.take("acct", "t", "q", 100, true); err != nil {
		t.Fatalf("other partition: %v", err)
	}
	if err := lm.take("acct", "T", "p", 1, true); err != errPartitionBusy {
		t.Fatalf("table case: %v", err)
	}
	// 50 ms refills 50 entities: 50 pass, the 51st does not.
	clock.t += 50 * time.Millisecond
	for i := range 50 {
		if err := lm.take("acct", "t", "p", 1, true); err != nil {
			t.Fatalf("entity %d after refill: %v", i, err)
		}
	}
	if err := lm.take("acct", "t", "p", 1, true); err != errPartitionBusy {
		t.Fatalf("entity 51 after refill: %v", err)
	}
	// A long idle refills to the burst, no further.
	clock.t += time.Hour
	if err := lm.take("acct", "t", "p", 200, true); err != nil {
		t.Fatal(err)
	}
	if err := lm.take("acct", "t", "p", 1, true); err != errPartitionBusy {
		t.Fatalf("past the burst: %v", err)
	}
	// A batch costs at most... a bucket always holds one full batch, even
	// at a rate below 100 a second.
	slow, _ := testLimiter(Limits{PartitionRate: 10, AccountRate: 1e6})
	if err := slow.take("a", "t", "p", 100, true); err != nil {
		t.Fatalf("a batch at a low rate: %v", err)
	}
}

// TestLimiterAccount checks the account's bucket: past it, the answer is
// the account's, and the partition's tokens are given back.
func TestLimiterAccount(t *testing.T) {
	lm, clock := testLimiter(Limits{PartitionRate: 100, AccountRate: 10000, Burst: 100 * time.Millisecond})
	// The account holds 1,000; ten partitions of 100 each use it up.
	for i := range 10 {
		if err := lm.take("acct", "t", fmt.Sprint(i), 100, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := lm.take("acct", "t", "fresh", 10, true); err != errAccountBusy {
		t.Fatalf("past the account: %v, want the account's refusal", err)
	}
	if err := lm.take("other", "t", "fresh", 10, true); err != nil {
		t.Fatalf("another account: %v", err)
	}
	// "fresh" was given its 10 back: 10 ms later the account has 100
	// again and the partition (refilling at 1 per 10 ms) all its 100.
	clock.t += 10 * time.Millisecond
	if err := lm.take("acct", "t", "fresh", 100, true); err != nil {
		t.Fatalf("the refused partition's tokens were not given back: %v", err)
	}
	// Table operations charge the account alone.
	clock.t += 100 * time.Millisecond
	if err := lm.take("acct", "t", "", 1000, false); err != nil {
		t.Fatal(err)
	}
	if err := lm.take("acct", "t", "", 1, false); err != errAccountBusy {
		t.Fatalf("%v", err)
	}
}

// TestLimiterReserve checks a query's reservations: the wait grows with
// the debt, and an unused one is given back.
func TestLimiterReserve(t *testing.T) {
	lm, _ := testLimiter(Limits{PartitionRate: 1000, AccountRate: 1e6, Burst: 100 * time.Millisecond})
	for i := range 100 {
		if w := lm.reserve("a", "t", "p"); w != 0 {
			t.Fatalf("reservation %d within the burst waits %v", i, w)
		}
	}
	if w := lm.reserve("a", "t", "p"); w != time.Millisecond {
		t.Fatalf("one past the burst waits %v, want 1ms", w)
	}
	if w := lm.reserve("a", "t", "p"); w != 2*time.Millisecond {
		t.Fatalf("two past the burst waits %v, want 2ms", w)
	}
	lm.unreserve("a", "t", "p")
	if w := lm.reserve("a", "t", "p"); w != 2*time.Millisecond {
		t.Fatalf("after a refund, waits %v, want 2ms", w)
	}
	// Writers are refused while a scan is in debt.
	if err := lm.take("a", "t", "p", 1, true); err != errPartitionBusy {
		t.Fatalf("a write during a scan's debt: %v", err)
	}
}

// TestLimiterBoundedMemory touches far more partitions than the limiter
// tracks: it keeps at most MaxTracked buckets, drops idle ones first, and
// a hot partition touched all along keeps its bucket (and its debt).
func TestLimiterBoundedMemory(t *testing.T) {
	lm, clock := testLimiter(Limits{PartitionRate: 100, AccountRate: 1e9, MaxTracked: 1024})
	if err := lm.take("a", "t", "hot", 100, true); err != nil {
		t.Fatal(err)
	}
	for i := range 200000 {
		if i%100 == 0 {
			clock.t += time.Microsecond
			// The hot partition stays recent, and stays in debt.
			if err := lm.take("a", "t", "hot", 1, true); err != errPartitionBusy {
				t.Fatalf("the hot partition lost its bucket after %d others: %v", i, err)
			}
		}
		if err := lm.take("a", "t", fmt.Sprint("cold", i), 1, true); err != nil {
			t.Fatal(err)
		}
		if n := lm.tracked(); n > 1024 {
			t.Fatalf("%d buckets after %d partitions, want at most 1024", n, i+1)
		}
	}
	// Idle buckets go as new ones come, before the set is full.
	clock.t += idleAfter + time.Second
	n0 := lm.tracked()
	for i := range 100 {
		if err := lm.take("a", "t", fmt.Sprint("new", i), 1, true); err != nil {
			t.Fatal(err)
		}
	}
	if n := lm.tracked(); n > n0-100 {
		t.Errorf("%d buckets after 100 new ones among %d idle: idle ones are not swept", n, n0)
	}
}

// TestLimiterHot checks the hot view's rates and order.
func TestLimiterHot(t *testing.T) {
	lm, clock := testLimiter(Limits{PartitionRate: 1000, AccountRate: 1e6, Burst: 100 * time.Millisecond})
	long := strings.Repeat("k", 500)
	// For 3 s: "hot" asks for 1,200/s, of which its rate serves 1,000 and
	// refuses 200; "warm" takes 100/s, long 10/s.
	for step := range 300 {
		clock.t = time.Duration(step) * 10 * time.Millisecond
		for range 12 {
			_ = lm.take("acct", "t", "hot", 1, true)
		}
		_ = lm.take("acct", "t", "warm", 1, true)
		if step%10 == 0 {
			_ = lm.take("acct", "t", long, 1, true)
		}
	}
	r := lm.hot(2)
	if len(r.Partitions) != 2 || r.Partitions[0].PartitionKey != "hot" || r.Partitions[1].PartitionKey != "warm" {
		t.Fatalf("hot partitions %+v", r.Partitions)
	}
	if got := r.Partitions[0].Rate; math.Abs(got-1000) > 100 {
		t.Errorf("hot rate %.1f, want 1000 ±10%%", got)
	}
	if got := r.Partitions[0].Refused; math.Abs(got-200) > 40 {
		t.Errorf("hot refused %.1f, want 200 ±20%%", got)
	}
	if got := r.Partitions[1].Rate; math.Abs(got-100) > 10 {
		t.Errorf("warm rate %.1f, want 100 ±10%%", got)
	}
	if len(r.Accounts) != 1 || r.Accounts[0].Account != "acct" || math.Abs(r.Accounts[0].Rate-1110) > 111 {
		t.Errorf("accounts %+v", r.Accounts)
	}
	if r.Tracked != 3 || r.PartitionRate != 1000 || r.AccountRate != 1e6 {
		t.Errorf("report %+v", r)
	}
	all := lm.hot(10)
	if len(all.Partitions) != 3 || len(all.Partitions[2].PartitionKey) != maxShownKey {
		t.Errorf("the long key is shown as %d bytes, want %d", len(all.Partitions[2].PartitionKey), maxShownKey)
	}
	// Rates decay once the load stops.
	clock.t += 10 * time.Second
	if r := lm.hot(10); len(r.Partitions) != 0 {
		t.Errorf("after 10 idle seconds, still hot: %+v", r.Partitions)
	}
}

func TestLimitsValidate(t *testing.T) {
	for _, l := range []Limits{
		{PartitionRate: -1}, {AccountRate: -1}, {PartitionRate: math.NaN()}, {AccountRate: math.Inf(1)},
		{Burst: -time.Second}, {QueryBudget: -1}, {MaxTracked: -1},
	} {
		if err := l.Validate(); err == nil {
			t.Errorf("%+v validates", l)
		}
	}
	if err := (&Limits{}).Validate(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}
