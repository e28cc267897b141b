package lsm

import (
	"testing"
	"time"

	"github.com/tabuladb/tabula/internal/base"
)

// TestSpinUntilVisible checks the watch an unsynced batch's Wait keeps
// before it sleeps: it sees a sequence number published by another
// goroutine while it spins, and gives up once its time is out.
func TestSpinUntilVisible(t *testing.T) {
	db := openTestDB(t, t.TempDir(), smallOptions())
	defer db.Close()
	now := base.SeqNum(db.visibleSeq.Load())

	if !db.spinUntilVisible(now, 0) {
		t.Error("a visible sequence number was not seen at once")
	}
	if db.spinUntilVisible(now+1, 0) {
		t.Error("spinning for no time saw a sequence number not published")
	}
	start := time.Now()
	if db.spinUntilVisible(now+1, time.Millisecond) {
		t.Error("a sequence number never published was seen")
	}
	if waited := time.Since(start); waited < time.Millisecond {
		t.Errorf("gave up after %v, before its millisecond", waited)
	}

	// Published while the spin runs: the spin, given far longer, ends
	// when it sees it.
	go func() {
		time.Sleep(time.Millisecond)
		db.visibleSeq.Store(uint64(now + 1))
	}()
	if !db.spinUntilVisible(now+1, time.Minute) {
		t.Error("a sequence number published during the spin was not seen")
	}
}
