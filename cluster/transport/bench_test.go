package transport

import (
	"testing"
	"time"

	"github.com/tabuladb/tabula/internal/rusage"
)

// BenchmarkPingPong sends one raft message from one transport to another
// and its answer back, b.N times, each after the last answer arrived, and
// reports the process's CPU and context switches per round trip: the
// transport's cost per message when nothing batches.
func BenchmarkPingPong(b *testing.B) {
	pong := make(chan struct{}, 1)
	var bt *Transport
	a := startNode(b, 1, func(o *Options, _ *tuning) {
		o.Deliver = func(uint64, []Message) { pong <- struct{}{} }
	})
	bn := startNode(b, 2, func(o *Options, _ *tuning) {
		o.Deliver = func(_ uint64, msgs []Message) {
			answer := msg(2, 1, msgs[0].Raft.GetIndex())
			answer.Raft.Context = msgs[0].Raft.Context
			bt.Send([]Message{answer})
		}
	})
	bt = bn.tr
	defer a.close()
	defer bn.close()
	a.tr.SetPeer(2, bn.addr)
	bn.tr.SetPeer(1, a.addr)
	ping := func(i int) {
		m := msg(1, 2, uint64(i))
		m.Raft.Context = make([]byte, 700) // an append of a small entity
		a.tr.Send([]Message{m})
		select {
		case <-pong:
		case <-time.After(5 * time.Second):
			b.Fatalf("no answer to ping %d", i) // a stream broke: raft would retransmit, this does not
		}
	}
	ping(0) // open both streams
	before, err := rusage.Self()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		ping(i + 1)
	}
	b.StopTimer()
	after, err := rusage.Self()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64((after.CPU-before.CPU).Microseconds())/float64(b.N), "cpu-us/op")
	b.ReportMetric(float64(after.Switches-before.Switches)/float64(b.N), "switches/op")
}
