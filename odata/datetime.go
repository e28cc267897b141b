package odata

import "time"

// DateTime is an Edm.DateTime: a UTC instant counted in 100-nanosecond ticks
// since 0001-01-01T00:00:00Z, the .NET representation the service uses, so
// that every stored value keeps its full 7-digit precision.
type DateTime int64

// The range the service accepts for Edm.DateTime values.
const (
	MinDateTime DateTime = 504911232000000000  // 1601-01-01T00:00:00Z
	MaxDateTime DateTime = 3155378975999999999 // 9999-12-31T23:59:59.9999999Z
)

const (
	ticksPerSecond = 10_000_000
	ticksPerDay    = 86400 * ticksPerSecond
	// unixEpochTicks is 1970-01-01T00:00:00Z in ticks.
	unixEpochTicks = 621355968000000000
)

// DateTimeFromTime converts t to ticks, truncating below 100 ns. It does not
// check the service's range; see DateTime.Valid.
func DateTimeFromTime(t time.Time) DateTime {
	t = t.UTC()
	days := daysFromCivil(int64(t.Year()), int64(t.Month()), int64(t.Day()))
	secs := days*86400 + int64(t.Hour())*3600 + int64(t.Minute())*60 + int64(t.Second())
	return DateTime(secs*ticksPerSecond + int64(t.Nanosecond()/100))
}

// Time converts d to a UTC time.Time.
func (d DateTime) Time() time.Time {
	ticks := int64(d) - unixEpochTicks
	sec := ticks / ticksPerSecond
	rem := ticks % ticksPerSecond
	if rem < 0 {
		sec--
		rem += ticksPerSecond
	}
	return time.Unix(sec, rem*100).UTC()
}

// Valid reports whether d lies in the range the service accepts.
func (d DateTime) Valid() bool { return d >= MinDateTime && d <= MaxDateTime }

// String formats d the way the service writes Edm.DateTime values: ISO 8601
// in UTC with trailing zeros of the fraction dropped (.NET's round-trip
// "FFFFFFF"), e.g. 2024-01-02T03:04:05Z or 2024-01-02T03:04:05.12Z.
func (d DateTime) String() string { return string(d.AppendText(nil)) }

// AppendText appends d as String formats it.
func (d DateTime) AppendText(dst []byte) []byte { return d.appendISO(dst, false) }

// AppendFixed appends d with exactly seven fractional digits, the form the
// service uses inside ETags (W/"datetime'...'").
func (d DateTime) AppendFixed(dst []byte) []byte { return d.appendISO(dst, true) }

func (d DateTime) appendISO(dst []byte, fixed bool) []byte {
	ticks := int64(d)
	if ticks < 0 {
		ticks = 0 // unreachable for validated values; keeps the arithmetic sane
	}
	days := ticks / ticksPerDay
	rem := ticks % ticksPerDay
	y, m, dd := civilFromDays(days)
	secOfDay := rem / ticksPerSecond
	frac := rem % ticksPerSecond
	dst = appendDigits(dst, y, 4)
	dst = append(dst, '-')
	dst = appendDigits(dst, m, 2)
	dst = append(dst, '-')
	dst = appendDigits(dst, dd, 2)
	dst = append(dst, 'T')
	dst = appendDigits(dst, secOfDay/3600, 2)
	dst = append(dst, ':')
	dst = appendDigits(dst, secOfDay/60%60, 2)
	dst = append(dst, ':')
	dst = appendDigits(dst, secOfDay%60, 2)
	if fixed || frac != 0 {
		digits := 7
		if !fixed {
			for frac%10 == 0 {
				frac /= 10
				digits--
			}
		}
		dst = append(dst, '.')
		dst = appendDigits(dst, frac, digits)
	}
	return append(dst, 'Z')
}

func appendDigits(dst []byte, v int64, width int) []byte {
	var buf [20]byte
	i := len(buf)
	for v > 0 || width > 0 {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
		width--
	}
	return append(dst, buf[i:]...)
}

// ParseDateTime parses an Edm.DateTime as clients send it:
// YYYY-MM-DDThh:mm[:ss[.f{1,7}]] followed by Z, an offset ±hh:mm, or nothing
// (a timezone-less value is UTC, as the service treats it). It reports false
// for anything else, including more than 7 fractional digits. Values outside
// the service's range parse but fail Valid.
func ParseDateTime(s string) (DateTime, bool) {
	// Fixed positions keep this allocation-free and strict.
	if len(s) < 16 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't') || s[13] != ':' {
		return 0, false
	}
	year, ok1 := atoiN(s[0:4])
	month, ok2 := atoiN(s[5:7])
	day, ok3 := atoiN(s[8:10])
	hour, ok4 := atoiN(s[11:13])
	minute, ok5 := atoiN(s[14:16])
	if !(ok1 && ok2 && ok3 && ok4 && ok5) {
		return 0, false
	}
	var second, frac int64
	i := 16
	if i < len(s) && s[i] == ':' {
		if len(s) < i+3 {
			return 0, false
		}
		v, ok := atoiN(s[i+1 : i+3])
		if !ok {
			return 0, false
		}
		second = v
		i += 3
		if i < len(s) && s[i] == '.' {
			i++
			start := i
			for i < len(s) && s[i] >= '0' && s[i] <= '9' {
				i++
			}
			n := i - start
			if n == 0 || n > 7 {
				return 0, false
			}
			v, _ := atoiN(s[start:i])
			for ; n < 7; n++ {
				v *= 10
			}
			frac = v
		}
	}
	var offset int64 // seconds east of UTC
	switch {
	case i == len(s):
	case (s[i] == 'Z' || s[i] == 'z') && i+1 == len(s):
	case (s[i] == '+' || s[i] == '-') && len(s) == i+6 && s[i+3] == ':':
		oh, ok1 := atoiN(s[i+1 : i+3])
		om, ok2 := atoiN(s[i+4 : i+6])
		if !ok1 || !ok2 || oh > 23 || om > 59 {
			return 0, false
		}
		offset = oh*3600 + om*60
		if s[i] == '-' {
			offset = -offset
		}
	default:
		return 0, false
	}
	if month < 1 || month > 12 || day < 1 || day > daysIn(year, month) ||
		hour > 23 || minute > 59 || second > 59 || year < 1 {
		return 0, false
	}
	days := daysFromCivil(year, month, day)
	secs := days*86400 + hour*3600 + minute*60 + second - offset
	return DateTime(secs*ticksPerSecond + frac), true
}

// atoiN parses an all-digit string; used only on short fixed-width fields.
func atoiN(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	var v int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return v, true
}

func isLeap(y int64) bool { return y%4 == 0 && (y%100 != 0 || y%400 == 0) }

func daysIn(y, m int64) int64 {
	switch m {
	case 2:
		if isLeap(y) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil counts days from 0001-01-01 to y-m-d in the proleptic
// Gregorian calendar (Howard Hinnant's algorithm, shifted to .NET's epoch).
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	// 719468 aligns the algorithm's 0000-03-01 epoch with 1970-01-01;
	// 719162 is the number of days from 0001-01-01 to 1970-01-01.
	return era*146097 + doe - 719468 + 719162
}

func civilFromDays(days int64) (y, m, d int64) {
	z := days - 719162 + 719468
	era := z / 146097
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y = yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = doy - (153*mp+2)/5 + 1
	m = mp + 3
	if m > 12 {
		m -= 12
	}
	if m <= 2 {
		y++
	}
	return y, m, d
}

// AppendETag appends the service's weak ETag for a commit timestamp:
// W/"datetime'2021-04-06T21%3A03%3A31.9231271Z'" (colons percent-encoded).
func AppendETag(dst []byte, ts DateTime) []byte {
	dst = append(dst, `W/"datetime'`...)
	var buf [32]byte
	for _, c := range ts.AppendFixed(buf[:0]) {
		if c == ':' {
			dst = append(dst, "%3A"...)
		} else {
			dst = append(dst, c)
		}
	}
	return append(dst, `'"`...)
}

// ETag returns AppendETag's form as a string.
func ETag(ts DateTime) string { return string(AppendETag(nil, ts)) }
