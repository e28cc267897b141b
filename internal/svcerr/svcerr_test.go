package svcerr

import (
	"context"
	"errors"
	"fmt"
	"testing"
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
