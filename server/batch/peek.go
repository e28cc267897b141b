package batch

// FirstTable returns the table the first operation of a $batch body
// addresses, read from the start of the body without parsing the rest:
// the first line that is a request line names it. account is as for
// ParseTarget. "" when the start holds no such line, or its URL names no
// table. A cluster node routes the batch by it before the body is read
// in full; the batch's own parse still checks every operation.
func FirstTable(start []byte, account string) string {
	for rest := start; len(rest) > 0; {
		var line []byte
		line, rest, _ = nextLine(rest)
		_, rawURL, _, ok := parseRequestLine(string(line))
		if !ok {
			continue
		}
		op := Operation{RawURL: rawURL}
		t, err := op.Target(account)
		if err != nil || (t.Kind != TargetEntity && t.Kind != TargetEntitySet) {
			return ""
		}
		return t.Table
	}
	return ""
}
