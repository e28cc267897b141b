package server

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// A FaultSpec says which failures a server injects, how often, into which
// operations: the parsed form of serve's --faults (docs/faults.md has the
// grammar and examples). Parse one with ParseFaultSpec; String formats it
// back into a specification that parses to an equal FaultSpec.
type FaultSpec struct {
	seed    uint64
	hasSeed bool
	kinds   [numOpKinds]kindFaults
	down    []unavailability
}

// opKind is an operation kind faults and limits tell apart.
type opKind uint8

const (
	kindInsert opKind = iota // Insert Entity, and the inserts of nothing else
	kindUpdate               // Update Entity (PUT with If-Match)
	kindMerge                // Merge Entity (MERGE or PATCH with If-Match)
	kindUpsert               // Insert Or Replace, Insert Or Merge
	kindDelete               // Delete Entity
	kindBatch                // an entity group transaction, as a whole
	kindGet                  // a point query, alone or as a batch's only operation
	kindQuery                // Query Entities, one page
	kindTable                // Create Table, Delete Table, Query Tables
	numOpKinds
)

var opKindNames = [numOpKinds]string{"insert", "update", "merge", "upsert", "delete", "batch", "get", "query", "table"}

// failure is a kind of injected failure.
type failure uint8

const (
	failBusy     failure = iota // 503 ServerBusy
	failInternal                // 500 InternalError
	failTimeout                 // 500 OperationTimedOut
	failReset                   // the connection reset, no answer
	numFailures
)

var failureNames = [numFailures]string{"503", "500", "timeout", "reset"}

// failureAfter is each failure's phase when the spec names none: a
// timeout is the service's answer to a request it went on to finish, the
// others refuse the request before it does anything.
var failureAfter = [numFailures]bool{failTimeout: true}

// Phases of a failure: before the operation (nothing applied) or after it
// committed (applied exactly once, the answer lost or a failure).
const (
	phaseBefore = 0
	phaseAfter  = 1
)

// kindFaults is what one operation kind suffers.
type kindFaults struct {
	rates   [numFailures][2]float64 // probability per failure and phase
	latency latency
}

// latency is a distribution of added delay.
type latency struct {
	dist     latencyDist
	min, max time.Duration // fixed: min; uniform: min..max; exponential: min is the mean
}

type latencyDist uint8

const (
	latencyNone latencyDist = iota
	latencyFixed
	latencyUniform
	latencyExp
)

// unavailability is a range of a table refusing requests for a while, as
// during a partition move.
type unavailability struct {
	table  string // lower case: table names are case-insensitive
	prefix string // of the PartitionKey; "" is the whole table
	start  time.Duration
	dur    time.Duration
}

// Bounds that keep a specification sensible: an added latency past the
// server's own write timeout could only fail the request in another way,
// and an outage of more than a day is no fault to test retries against.
const (
	maxFaultLatency  = time.Minute
	maxOutageSpan    = 24 * time.Hour
	rateSumTolerance = 1e-9 // 0.1+0.2+0.7 must not read as more than 1
)

// ParseFaultSpec parses a --faults specification. An empty (or blank)
// specification is valid and injects nothing. The error names the part
// that is wrong.
func ParseFaultSpec(spec string) (*FaultSpec, error) {
	fs := &FaultSpec{}
	for clause := range strings.SplitSeq(spec, ";") {
		clause = strings.TrimSpace(clause)
		if clause == "" {
			continue
		}
		if err := fs.parseClause(clause); err != nil {
			return nil, fmt.Errorf("faults: %q: %w", clause, err)
		}
	}
	for k := range fs.kinds {
		sum := 0.0
		for _, r := range fs.kinds[k].rates {
			sum += r[phaseBefore] + r[phaseAfter]
		}
		if sum > 1+rateSumTolerance {
			return nil, fmt.Errorf("faults: the failure rates of %s add up to %s, more than 1", opKindNames[k], formatRate(sum))
		}
	}
	return fs, nil
}

func (fs *FaultSpec) parseClause(clause string) error {
	if v, ok := cutKey(clause, "seed"); ok {
		if fs.hasSeed {
			return errors.New("the seed is given twice")
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return fmt.Errorf("seed %q: want a whole number from 0 to %d", v, uint64(math.MaxUint64))
		}
		fs.seed, fs.hasSeed = n, true
		return nil
	}
	if v, ok := cutKey(clause, "unavailable"); ok {
		u, err := parseUnavailability(v)
		if err != nil {
			return err
		}
		fs.down = append(fs.down, u)
		return nil
	}
	var kinds [numOpKinds]bool
	ops, items, scoped := strings.Cut(clause, ":")
	if !scoped {
		items = ops
		for k := range kinds {
			kinds[k] = true
		}
	} else {
		for op := range strings.SplitSeq(ops, "|") {
			op = strings.TrimSpace(op)
			if op == "*" || op == "all" {
				for k := range kinds {
					kinds[k] = true
				}
				continue
			}
			k, ok := parseOpKind(op)
			if !ok {
				return fmt.Errorf("unknown operation %q: want %s, all or *", op, strings.Join(opKindNames[:], ", "))
			}
			kinds[k] = true
		}
	}
	for item := range strings.SplitSeq(items, ",") {
		if err := fs.parseItem(strings.TrimSpace(item), &kinds); err != nil {
			return err
		}
	}
	return nil
}

// parseItem reads one name=value of a clause and sets it for kinds; a
// later setting of the same failure and phase (or latency) for a kind
// replaces an earlier one, so "reset=0.01;insert:reset=0" exempts inserts.
func (fs *FaultSpec) parseItem(item string, kinds *[numOpKinds]bool) error {
	name, value, ok := strings.Cut(item, "=")
	if !ok {
		return fmt.Errorf("%q: want name=value, such as 503=0.05 or latency=20ms", item)
	}
	name, value = strings.TrimSpace(name), strings.TrimSpace(value)
	if name == "latency" {
		l, err := parseLatency(value)
		if err != nil {
			return fmt.Errorf("latency=%s: %w", value, err)
		}
		for k, on := range kinds {
			if on {
				fs.kinds[k].latency = l
			}
		}
		return nil
	}
	base, phaseName, phased := strings.Cut(name, ".")
	f, ok := parseFailure(base)
	if !ok {
		return fmt.Errorf("unknown fault %q: want 503, 500, timeout, reset or latency", name)
	}
	phase := phaseBefore
	if failureAfter[f] {
		phase = phaseAfter
	}
	if phased {
		switch phaseName {
		case "before":
			phase = phaseBefore
		case "after":
			phase = phaseAfter
		default:
			return fmt.Errorf("%q: the phase is before or after, not %q", name, phaseName)
		}
	}
	if f == failBusy && phase == phaseAfter {
		return errors.New("503.after: ServerBusy refuses a request before it runs; it has no after phase")
	}
	r, err := parseRate(value)
	if err != nil {
		return fmt.Errorf("%s=%s: %w", name, value, err)
	}
	for k, on := range kinds {
		if on {
			fs.kinds[k].rates[f][phase] = r
		}
	}
	return nil
}

// cutKey returns what follows "key=" at the start of s.
func cutKey(s, key string) (string, bool) {
	k, v, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(k) != key {
		return "", false
	}
	return strings.TrimSpace(v), true
}

func parseOpKind(s string) (opKind, bool) {
	for k, n := range opKindNames {
		if s == n {
			return opKind(k), true
		}
	}
	return 0, false
}

func parseFailure(s string) (failure, bool) {
	for f, n := range failureNames {
		if s == n {
			return failure(f), true
		}
	}
	return 0, false
}

// parseRate reads a probability: a decimal from 0 to 1, or a percentage.
func parseRate(s string) (float64, error) {
	pct := strings.HasSuffix(s, "%")
	num := strings.TrimSuffix(s, "%")
	r, err := strconv.ParseFloat(num, 64)
	// ParseFloat takes "NaN", "Inf" and hex floats; a rate is plain decimal.
	if err != nil || strings.ContainsAny(num, "nNiIxXpP_") {
		return 0, errors.New("want a rate from 0 to 1, or a percentage such as 5%")
	}
	if pct {
		r /= 100
	}
	if r < 0 || r > 1 {
		return 0, errors.New("a rate is from 0 to 1 (0% to 100%)")
	}
	return r, nil
}

func formatRate(r float64) string { return strconv.FormatFloat(r, 'g', -1, 64) }

// parseDuration reads a duration of time.ParseDuration's form that is not
// negative and at most limit.
func parseDuration(s string, limit time.Duration) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q is not a duration such as 50ms or 2s", s)
	case d < 0:
		return 0, fmt.Errorf("%q: a duration cannot be negative", s)
	case d > limit:
		return 0, fmt.Errorf("%q: at most %v", s, limit)
	}
	return d, nil
}

// parseLatency reads D (fixed), A..B (uniform) or exp(MEAN) (exponential).
func parseLatency(s string) (latency, error) {
	if inner, ok := strings.CutPrefix(s, "exp("); ok {
		mean, ok := strings.CutSuffix(inner, ")")
		if !ok {
			return latency{}, errors.New("exp( needs its )")
		}
		d, err := parseDuration(strings.TrimSpace(mean), maxFaultLatency)
		if err != nil {
			return latency{}, err
		}
		if d == 0 {
			return latency{}, nil
		}
		return latency{dist: latencyExp, min: d}, nil
	}
	if lo, hi, ok := strings.Cut(s, ".."); ok {
		a, err := parseDuration(strings.TrimSpace(lo), maxFaultLatency)
		if err != nil {
			return latency{}, err
		}
		b, err := parseDuration(strings.TrimSpace(hi), maxFaultLatency)
		if err != nil {
			return latency{}, err
		}
		switch {
		case b < a:
			return latency{}, fmt.Errorf("the range's low end %v is past its high end %v", a, b)
		case a == b && a == 0:
			return latency{}, nil
		case a == b:
			return latency{dist: latencyFixed, min: a}, nil
		}
		return latency{dist: latencyUniform, min: a, max: b}, nil
	}
	d, err := parseDuration(s, maxFaultLatency)
	if err != nil || d == 0 {
		return latency{}, err
	}
	return latency{dist: latencyFixed, min: d}, nil
}

func (l latency) String() string {
	switch l.dist {
	case latencyFixed:
		return l.min.String()
	case latencyUniform:
		return l.min.String() + ".." + l.max.String()
	case latencyExp:
		return "exp(" + l.min.String() + ")"
	}
	return "0s"
}

// parseUnavailability reads TABLE[/PREFIX]@[START+]DURATION: the range of
// TABLE whose PartitionKeys start with PREFIX (percent-encoded, so it may
// hold any character) refuses requests from START after the server starts
// for DURATION.
func parseUnavailability(s string) (unavailability, error) {
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return unavailability{}, fmt.Errorf("unavailable=%s: want TABLE[/PREFIX]@[START+]DURATION, such as orders/2024@2s+10s", s)
	}
	where, when := s[:at], s[at+1:]
	table, prefix, _ := strings.Cut(where, "/")
	if !validTableName(table) {
		return unavailability{}, fmt.Errorf("unavailable: %q is not a table name (a letter, then letters and digits, 3 to 63 in all)", table)
	}
	p, err := unescapePrefix(prefix)
	if err != nil {
		return unavailability{}, fmt.Errorf("unavailable: the prefix %q: %w", prefix, err)
	}
	u := unavailability{table: strings.ToLower(table), prefix: p}
	span := when
	if start, rest, ok := strings.Cut(when, "+"); ok {
		if u.start, err = parseDuration(strings.TrimSpace(start), maxOutageSpan); err != nil {
			return unavailability{}, fmt.Errorf("unavailable: the start: %w", err)
		}
		span = rest
	}
	if u.dur, err = parseDuration(strings.TrimSpace(span), maxOutageSpan); err != nil {
		return unavailability{}, fmt.Errorf("unavailable: the duration: %w", err)
	}
	if u.dur == 0 {
		return unavailability{}, errors.New("unavailable: the duration must be more than 0")
	}
	return u, nil
}

// validTableName reports whether s has a table name's form.
func validTableName(s string) bool {
	if len(s) < 3 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// prefixSafe reports the bytes a prefix may hold unescaped: none that the
// grammar uses (; , @ % : = |) nor space, which clauses trim.
func prefixSafe(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.~/!*()'", c) >= 0
}

func unescapePrefix(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' {
			if i+2 >= len(s) || unhex(s[i+1]) < 0 || unhex(s[i+2]) < 0 {
				return "", errors.New("a % must be followed by two hex digits")
			}
			b.WriteByte(byte(unhex(s[i+1])<<4 | unhex(s[i+2])))
			i += 2
			continue
		}
		if !prefixSafe(c) {
			return "", fmt.Errorf("%q must be percent-encoded (%%%02X)", c, c)
		}
		b.WriteByte(c)
	}
	return b.String(), nil
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func escapePrefix(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; prefixSafe(c) {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// String formats the specification canonically: the seed, then one clause
// per group of operation kinds that suffer the same faults (no kinds named
// when all do), then the outages in the order given.
func (fs *FaultSpec) String() string {
	var clauses []string
	if fs.hasSeed {
		clauses = append(clauses, "seed="+strconv.FormatUint(fs.seed, 10))
	}
	var groups []string              // item lists, in the order of their first kind
	members := map[string][]string{} // item list -> its kinds
	for k := range fs.kinds {
		items := fs.kinds[k].items()
		if items == "" {
			continue
		}
		if _, seen := members[items]; !seen {
			groups = append(groups, items)
		}
		members[items] = append(members[items], opKindNames[k])
	}
	for _, items := range groups {
		if len(members[items]) == int(numOpKinds) {
			clauses = append(clauses, items)
		} else {
			clauses = append(clauses, strings.Join(members[items], "|")+":"+items)
		}
	}
	for _, u := range fs.down {
		c := "unavailable=" + u.table
		if u.prefix != "" {
			c += "/" + escapePrefix(u.prefix)
		}
		c += "@"
		if u.start != 0 {
			c += u.start.String() + "+"
		}
		clauses = append(clauses, c+u.dur.String())
	}
	return strings.Join(clauses, ";")
}

// items formats one kind's faults, "" when it has none.
func (kf *kindFaults) items() string {
	var parts []string
	for f := range kf.rates {
		for phase, r := range kf.rates[f] {
			if r == 0 {
				continue
			}
			name := failureNames[f]
			if (phase == phaseAfter) != failureAfter[f] {
				name += [2]string{".before", ".after"}[phase]
			}
			parts = append(parts, name+"="+formatRate(r))
		}
	}
	if kf.latency.dist != latencyNone {
		parts = append(parts, "latency="+kf.latency.String())
	}
	return strings.Join(parts, ",")
}

// empty reports whether the specification injects nothing at all.
func (fs *FaultSpec) empty() bool {
	if len(fs.down) > 0 {
		return false
	}
	for k := range fs.kinds {
		if fs.kinds[k].items() != "" {
			return false
		}
	}
	return true
}
