package partition

// A span snapshot may bring a group a smaller span than the one it holds
// here: a replica that lagged past a split of its group takes the
// parent's snapshot made after it, and with it the parent's new span
// only. The keys of the part it gives up were its own until then; if no
// other group of the store holds them (the child's member may never come
// here, or come and go before the snapshot), nothing would ever serve,
// move or delete them again. The ingest deletes them with the span it
// replaces (spansGivenUp). A part another group records is left to that
// group: a child started here, or a frozen span kept for its merge. So
// is the whole table while its first group has no record here: that
// group may not have applied its split yet, and will hand those keys to
// its child when it does.

// spansGivenUp returns the parts of group's span in table t that taking
// span now gives up and that no other group of the store holds. A group
// with no span here gives up nothing.
func (s *Store) spansGivenUp(t *table, group uint64, now Span) ([]Span, error) {
	old, ok, err := s.groupSpanOf(group)
	if err != nil || !ok || old.tableID != t.id {
		return nil, err
	}
	left := SpanMinus([]Span{old.span}, now)
	if len(left) == 0 {
		return nil, nil
	}
	holders, err := s.spanHolders(t, group, old.span)
	if err != nil {
		return nil, err
	}
	for _, h := range holders {
		left = SpanMinus(left, h.Span)
	}
	return left, nil
}

// SpanMinus returns the parts of spans outside cut, in order (spans are
// of one table, in order and apart; cut of the same table).
func SpanMinus(spans []Span, cut Span) []Span {
	var out []Span
	for _, sp := range spans {
		// Below cut: [sp.low, min(sp.high, cut.low)).
		if sp.LowPartitionKey < cut.LowPartitionKey {
			below := sp
			if highBelow(cut.LowPartitionKey, sp.HighPartitionKey) {
				below.HighPartitionKey = cut.LowPartitionKey
			}
			out = append(out, below)
		}
		// Above cut: [max(sp.low, cut.high), sp.high).
		if cut.HighPartitionKey != "" && highBelow(cut.HighPartitionKey, sp.HighPartitionKey) {
			above := sp
			above.LowPartitionKey = max(sp.LowPartitionKey, cut.HighPartitionKey)
			out = append(out, above)
		}
	}
	return out
}

// highBelow reports whether span end a comes before span end b, where ""
// is the end of the table.
func highBelow(a, b string) bool {
	return a != "" && (b == "" || a < b)
}
