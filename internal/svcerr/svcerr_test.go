package svcerr

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestRetryNote(t *testing.T) {
	busy := &Error{Status: 503, Code: "ServerBusy", Message: "m"}
	moved := &Error{Status: 503, Code: "ServerBusy", Message: "m", Retry: true}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"a refusal that may not be repeated", busy, false},
		{"a refusal that may be repeated", moved, true},
		{"one wrapped", fmt.Errorf("apply: %w", moved), true},
		{"not an Error", errors.New("disk full"), false},
	} {
		ctx, note := WithRetryNote(context.Background())
		NoteRetry(ctx, c.err)
		if note.Set() != c.want {
			t.Errorf("%s: note set %v, want %v", c.name, note.Set(), c.want)
		}
	}
	NoteRetry(context.Background(), moved) // no note asked for: nothing to record, no panic
	ctx, note := WithRetryNote(context.Background())
	MarkRetry(ctx)
	if !note.Set() {
		t.Error("MarkRetry did not set the note")
	}
}

// TestDeferReport: a report is kept only on a note that holds reports,
// made once by Report, as of the start it is given.
func TestDeferReport(t *testing.T) {
	var made []time.Time
	report := func(start time.Time) { made = append(made, start) }
	if DeferReport(context.Background(), report) {
		t.Fatal("a report kept with no note")
	}
	ctx, _ := WithRetryNote(context.Background())
	if DeferReport(ctx, report) {
		t.Fatal("a report kept by a note that does not hold reports")
	}
	ctx, note := WithRetryNote(context.Background())
	note.HoldReport()
	if !DeferReport(ctx, report) || len(made) != 0 {
		t.Fatalf("a held report: kept %v, made %v", true, made)
	}
	start := time.Unix(1_700_000_000, 0)
	note.Report(start)
	note.Report(start.Add(time.Second))
	if len(made) != 1 || !made[0].Equal(start) {
		t.Fatalf("reports made: %v, want one as of %v", made, start)
	}
}
