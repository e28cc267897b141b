package odata

import (
	"strconv"
	"strings"
)

// MaxTop is the largest $top the service accepts: a page holds at most 1,000
// entities.
const MaxTop = 1000

// maxSelected is how many properties one $select may name: an entity has at
// most 255, system properties included.
const maxSelected = 255

// Selection is a parsed $select: the custom properties to return and whether
// each system property was asked for. A nil *Selection selects everything.
type Selection struct {
	names []string // custom property names, deduplicated, in request order
	pk    bool
	rk    bool
	ts    bool
}

// ParseSelect parses a $select value: property names separated by commas,
// blanks around them ignored. PartitionKey, RowKey and Timestamp are returned
// only when listed. "" and "*" select everything (nil). A name that is not a
// valid property name is InvalidInput.
func ParseSelect(s string) (*Selection, error) {
	if strings.TrimSpace(s) == "" || strings.TrimSpace(s) == "*" {
		return nil, nil
	}
	sel := &Selection{}
	for part := range strings.SplitSeq(s, ",") {
		name := strings.TrimSpace(part)
		switch name {
		case PartitionKeyName:
			sel.pk = true
			continue
		case RowKeyName:
			sel.rk = true
			continue
		case TimestampName:
			sel.ts = true
			continue
		}
		if name == "" || utf16Len(name) > MaxPropertyNameLength || !isIdentifier(name) {
			return nil, invalidInput("$select names an invalid property " + strconv.Quote(name) + ".")
		}
		dup := false
		for _, n := range sel.names {
			if n == name {
				dup = true
				break
			}
		}
		if !dup {
			sel.names = append(sel.names, name)
		}
	}
	if len(sel.names) > maxSelected {
		return nil, invalidInput("$select names more than 255 properties.")
	}
	return sel, nil
}

// Names returns the selected names, system properties first, as a $select
// value would list them.
func (s *Selection) Names() []string {
	if s == nil {
		return nil
	}
	var out []string
	if s.pk {
		out = append(out, PartitionKeyName)
	}
	if s.rk {
		out = append(out, RowKeyName)
	}
	if s.ts {
		out = append(out, TimestampName)
	}
	return append(out, s.names...)
}

// has reports whether a system property is selected.
func (s *Selection) has(system string) bool {
	if s == nil {
		return true
	}
	switch system {
	case PartitionKeyName:
		return s.pk
	case RowKeyName:
		return s.rk
	}
	return s.ts
}

// index returns the position of a custom property in the selection, or -1.
func (s *Selection) index(name []byte) int {
	for i, n := range s.names {
		if n == string(name) {
			return i
		}
	}
	return -1
}

// selMask records which selected names an entity had.
type selMask [(maxSelected + 63) / 64]uint64

func (m *selMask) set(i int)      { m[i/64] |= 1 << (i % 64) }
func (m *selMask) get(i int) bool { return m[i/64]&(1<<(i%64)) != 0 }

// ParseTop parses a $top value. The service accepts 0 to 1,000: $top=0 is a
// valid query that returns no entities (Azurite#1428 reports the service
// doing so), and anything else, including a sign, blanks or a number out of
// range, is InvalidInput.
func ParseTop(s string) (int, error) {
	if s == "" || len(s) > 10 {
		return 0, invalidInput("$top must be an integer from 0 to 1000.")
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, invalidInput("$top must be an integer from 0 to 1000.")
		}
		n = n*10 + int(s[i]-'0')
	}
	if n > MaxTop {
		return 0, invalidInput("$top must be an integer from 0 to 1000.")
	}
	return n, nil
}
