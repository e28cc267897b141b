package batch

import (
	"net/http"
	"net/url"
	"strings"
)

// TargetKind says what a Table service URL path addresses.
type TargetKind uint8

// The kinds of target.
const (
	TargetService   TargetKind = iota + 1 // "/": service properties and stats (with restype=service)
	TargetTables                          // "/Tables" or "/Tables()": query or create tables
	TargetTable                           // "/Tables('name')": one table, to delete it
	TargetEntitySet                       // "/name" or "/name()": a table's entities, ACL, inserts
	TargetEntity                          // "/name(PartitionKey='p',RowKey='r')"
	TargetBatch                           // "/$batch"
)

func (k TargetKind) String() string {
	switch k {
	case TargetService:
		return "Service"
	case TargetTables:
		return "Tables"
	case TargetTable:
		return "Table"
	case TargetEntitySet:
		return "EntitySet"
	case TargetEntity:
		return "Entity"
	case TargetBatch:
		return "Batch"
	}
	return "TargetKind(?)"
}

// Target is a parsed URL path. Table, PartitionKey and RowKey are decoded:
// percent-escapes undone and each doubled single quote made single.
type Target struct {
	Kind         TargetKind
	Secondary    bool   // the path named the account's "-secondary" endpoint
	Table        string // as written (table names compare case-insensitively)
	PartitionKey string
	RowKey       string
}

// ParseTarget splits a URL path as sent (still percent-encoded) into what it
// addresses. account is the account name when the path starts with it
// (path-style URLs, /devstoreaccount1/mytable) — the first segment must then
// be the account or its "-secondary" form — and "" when it does not
// (production-style hosts, relative sub-request URLs).
//
// Each segment is percent-decoded on its own, so an encoded '/' (%2F) in a
// key stays inside the key; quoted values are then read with a doubled
// single quote standing for one, allowing spaces around ',' and '='
// (documentation samples write "(PartitionKey='a', RowKey='b')"). A path
// that addresses nothing is a 400 InvalidUri *Error.
func ParseTarget(escapedPath, account string) (Target, error) {
	var t Target
	p := escapedPath
	if !strings.HasPrefix(p, "/") {
		return t, badURI("the path must start with '/'")
	}
	segs := strings.Split(p[1:], "/")
	// One trailing slash is harmless (/account/ is the service root).
	if len(segs) > 1 && segs[len(segs)-1] == "" {
		segs = segs[:len(segs)-1]
	}
	if account != "" {
		first, err := url.PathUnescape(segs[0])
		if err != nil {
			return t, badURI("the path holds a malformed percent-escape")
		}
		switch first {
		case account:
		case account + "-secondary":
			t.Secondary = true
		default:
			return t, badURI("the path does not start with the account name")
		}
		segs = segs[1:]
	}
	if len(segs) == 0 || (len(segs) == 1 && segs[0] == "") {
		t.Kind = TargetService
		return t, nil
	}
	if len(segs) > 1 {
		return t, badURI("the path has more segments than account and resource")
	}
	seg, err := url.PathUnescape(segs[0])
	if err != nil {
		return t, badURI("the path holds a malformed percent-escape")
	}
	if seg == "$batch" {
		t.Kind = TargetBatch
		return t, nil
	}
	name, args, hasArgs := strings.Cut(seg, "(")
	if name == "" {
		return t, badURI("the resource name is empty")
	}
	if !hasArgs {
		if strings.ContainsAny(name, ")'") {
			return t, badURI("unbalanced parentheses or quotes in " + quoteShort(seg))
		}
		if name == "Tables" {
			t.Kind = TargetTables
		} else {
			t.Kind, t.Table = TargetEntitySet, name
		}
		return t, nil
	}
	if !strings.HasSuffix(args, ")") {
		return t, badURI("the resource " + quoteShort(seg) + " does not end with ')'")
	}
	args = strings.TrimSpace(args[:len(args)-1])
	if name == "Tables" {
		if args == "" {
			t.Kind = TargetTables
			return t, nil
		}
		v, rest, ok := quoted(args)
		if !ok || strings.TrimSpace(rest) != "" || v == "" {
			return t, badURI("expected Tables('name'), got " + quoteShort(seg))
		}
		t.Kind, t.Table = TargetTable, v
		return t, nil
	}
	t.Table = name
	if args == "" {
		t.Kind = TargetEntitySet
		return t, nil
	}
	var havePK, haveRK bool
	for rest := args; ; {
		key, after, ok := strings.Cut(rest, "=")
		if !ok {
			return t, badURI("expected Key='value' in " + quoteShort(seg))
		}
		v, tail, ok := quoted(strings.TrimSpace(after))
		if !ok {
			return t, badURI("a key value is not a quoted string in " + quoteShort(seg))
		}
		switch strings.TrimSpace(key) {
		case "PartitionKey":
			if havePK {
				return t, badURI("PartitionKey given twice")
			}
			havePK, t.PartitionKey = true, v
		case "RowKey":
			if haveRK {
				return t, badURI("RowKey given twice")
			}
			haveRK, t.RowKey = true, v
		default:
			return t, badURI("unknown key " + quoteShort(strings.TrimSpace(key)) + "; expected PartitionKey and RowKey")
		}
		tail = strings.TrimSpace(tail)
		if tail == "" {
			break
		}
		if tail[0] != ',' {
			return t, badURI("expected ',' between keys in " + quoteShort(seg))
		}
		rest = tail[1:]
	}
	if !havePK || !haveRK {
		return t, badURI("an entity needs both PartitionKey and RowKey")
	}
	t.Kind = TargetEntity
	return t, nil
}

// quoted reads a single-quoted OData string literal at the start of s
// (a doubled quote stands for one) and returns its value and what follows.
func quoted(s string) (value, rest string, ok bool) {
	if !strings.HasPrefix(s, "'") {
		return "", "", false
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		if s[i] != '\'' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '\'' {
			b.WriteByte('\'')
			i++
			continue
		}
		return b.String(), s[i+1:], true
	}
	return "", "", false
}

func badURI(reason string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalidURI, Index: -1,
		Message: "The requested URI does not represent any resource on the server: " + reason + "."}
}

func quoteShort(s string) string { return "'" + truncate(s, 80) + "'" }
