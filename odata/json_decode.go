package odata

import (
	"encoding/base64"
	"math"
	"strconv"
	"strings"
)

// DecodedEntity is an entity read from a request body, with whether the body
// carried the keys: Insert needs them there, while Update, Merge and the
// upserts take them from the URL.
type DecodedEntity struct {
	Entity
	HasPartitionKey bool
	HasRowKey       bool
}

// member is a property of the body with the @odata.type annotation that
// applies to it, which the body may give before or after the value.
type member struct {
	name    string
	value   jsonValue
	typ     string
	typed   bool
	typePos int
}

// DecodeEntityJSON decodes an entity request body (OData v3 JSON light).
//
// Untyped values are inferred as the service does: a string is Edm.String, an
// integer literal within Int32 range Edm.Int32, any other number Edm.Double
// (so 5000000000 and 20.0 are doubles), true/false Edm.Boolean. A
// "Name@odata.type" annotation, before or after the value, types it instead:
// Int64 and Double (also "NaN", "Infinity", "-Infinity") may come as strings,
// DateTime as ISO 8601, Guid as text, Binary as base64. Null values are not
// stored. "odata.*" members, other annotations and Timestamp are ignored.
//
// Errors carry the service's codes: InvalidInput for bad JSON, a body that is
// not an object, or a value that cannot be read as its annotated type;
// InvalidValueType for an annotation naming no Edm primitive type or a value
// that is an object or array; PropertyNameInvalid / PropertyNameTooLong;
// DuplicatePropertiesSpecified; PropertiesNeedValue for a null key;
// TooManyProperties; PropertyValueTooLarge; OutOfRangeInput for a DateTime
// outside 1601–9999 or a forbidden key character; KeyValueTooLarge;
// EntityTooLarge.
func DecodeEntityJSON(body []byte) (DecodedEntity, error) {
	var out DecodedEntity
	sc := jsonScanner{s: string(body)}
	var stack [32]member
	members := stack[:0]
	var annStack [16]member
	anns := annStack[:0]
	err := sc.scanObject(func(key string, v jsonValue) error {
		if strings.HasPrefix(key, "odata.") {
			return nil
		}
		if at := strings.IndexByte(key, '@'); at >= 0 {
			if key[at+1:] != "odata.type" {
				return nil // other annotations carry nothing the service stores
			}
			if v.kind != jsonString {
				return invalidInput("The @odata.type annotation of " + key[:at] + " must be a string.")
			}
			anns = append(anns, member{name: key[:at], typ: v.text, typed: true, typePos: v.pos})
			return nil
		}
		members = append(members, member{name: key, value: v})
		return nil
	})
	if err != nil {
		return out, err
	}
	if hasDuplicateMembers(members) || hasDuplicateMembers(anns) {
		return out, newError(CodeDuplicatePropertiesSpecified, msgDuplicateProps)
	}
	for i := range anns {
		for j := range members {
			if members[j].name == anns[i].name {
				members[j].typ, members[j].typed = anns[i].typ, true
				break
			}
		}
	}

	custom := 0
	for i := range members {
		switch members[i].name {
		case PartitionKeyName, RowKeyName, TimestampName:
		default:
			if members[i].value.kind != jsonNull {
				custom++
			}
		}
	}
	if custom > MaxCustomProperties {
		return out, newError(CodeTooManyProperties, msgTooManyProperties)
	}
	if custom > 0 {
		out.Properties = make([]Property, 0, custom)
	}
	for i := range members {
		m := &members[i]
		switch m.name {
		case TimestampName:
			continue // server-set; a client's value is ignored
		case PartitionKeyName, RowKeyName:
			key, err := decodeKey(m)
			if err != nil {
				return out, err
			}
			if m.name == PartitionKeyName {
				out.PartitionKey, out.HasPartitionKey = key, true
			} else {
				out.RowKey, out.HasRowKey = key, true
			}
			continue
		}
		if err := ValidatePropertyName(m.name); err != nil {
			return out, err
		}
		if m.value.kind == jsonNull {
			continue
		}
		v, err := decodeValue(m)
		if err != nil {
			return out, err
		}
		if err := checkValue(m.name, v); err != nil {
			return out, err
		}
		out.Properties = append(out.Properties, Property{Name: m.name, Value: v})
	}
	if EntitySize(&out.Entity) > MaxEntitySize {
		return out, newError(CodeEntityTooLarge, msgEntityTooLarge)
	}
	return out, nil
}

func hasDuplicateMembers(ms []member) bool {
	if len(ms) <= 32 {
		for i := 1; i < len(ms); i++ {
			for j := 0; j < i; j++ {
				if ms[i].name == ms[j].name {
					return true
				}
			}
		}
		return false
	}
	seen := make(map[string]struct{}, len(ms))
	for i := range ms {
		if _, ok := seen[ms[i].name]; ok {
			return true
		}
		seen[ms[i].name] = struct{}{}
	}
	return false
}

func decodeKey(m *member) (string, error) {
	if m.typed && m.typ != "Edm.String" {
		return "", invalidInput(m.name + " must be of type Edm.String.")
	}
	switch m.value.kind {
	case jsonNull:
		return "", newError(CodePropertiesNeedValue, msgNeedValue+" ("+m.name+" is null)")
	case jsonString:
	default:
		return "", invalidInput(m.name + " must be a string.")
	}
	if err := ValidateKey(m.name, m.value.text); err != nil {
		return "", err
	}
	return m.value.text, nil
}

func badValue(m *member, typ Type) error {
	return invalidInput("The value of " + m.name + " cannot be read as " + typ.String() + ".")
}

// decodeValue turns a member's JSON value into a typed value, inferring the
// type when the body did not annotate it.
func decodeValue(m *member) (Value, error) {
	v := m.value
	if v.kind == jsonObject || v.kind == jsonArray {
		return Value{}, newError(CodeInvalidValueType, msgInvalidValueType+" ("+m.name+" is not a primitive value)")
	}
	if !m.typed {
		switch v.kind {
		case jsonString:
			return StringValue(v.text), nil
		case jsonTrue:
			return BoolValue(true), nil
		case jsonFalse:
			return BoolValue(false), nil
		}
		// A number: an integer literal that fits is Int32, anything else is
		// Double, as the service's JSON reader does.
		if isIntegerLiteral(v.text) {
			if n, err := strconv.ParseInt(v.text, 10, 32); err == nil {
				return Int32Value(int32(n)), nil
			}
		}
		f, ok := parseFiniteDouble(v.text)
		if !ok {
			return Value{}, badValue(m, TypeDouble)
		}
		return DoubleValue(f), nil
	}

	typ, ok := ParseTypeName(m.typ)
	if !ok {
		return Value{}, errorf(CodeInvalidValueType, "%s (unknown type %q for %s)", msgInvalidValueType, m.typ, m.name)
	}
	switch typ {
	case TypeString:
		if v.kind == jsonString {
			return StringValue(v.text), nil
		}
	case TypeInt32:
		if (v.kind == jsonNumber || v.kind == jsonString) && isIntegerLiteral(strings.TrimPrefix(v.text, "+")) {
			if n, err := strconv.ParseInt(v.text, 10, 32); err == nil {
				return Int32Value(int32(n)), nil
			}
		}
	case TypeInt64:
		if (v.kind == jsonNumber || v.kind == jsonString) && isIntegerLiteral(strings.TrimPrefix(v.text, "+")) {
			if n, err := strconv.ParseInt(v.text, 10, 64); err == nil {
				return Int64Value(n), nil
			}
		}
	case TypeDouble:
		switch v.kind {
		case jsonNumber:
			if f, ok := parseFiniteDouble(v.text); ok {
				return DoubleValue(f), nil
			}
		case jsonString:
			switch v.text {
			case "NaN":
				return DoubleValue(math.NaN()), nil
			case "Infinity", "INF":
				return DoubleValue(math.Inf(1)), nil
			case "-Infinity", "-INF":
				return DoubleValue(math.Inf(-1)), nil
			}
			if f, ok := parseFiniteDouble(v.text); ok {
				return DoubleValue(f), nil
			}
		}
	case TypeBoolean:
		switch v.kind {
		case jsonTrue:
			return BoolValue(true), nil
		case jsonFalse:
			return BoolValue(false), nil
		case jsonString:
			if strings.EqualFold(v.text, "true") {
				return BoolValue(true), nil
			}
			if strings.EqualFold(v.text, "false") {
				return BoolValue(false), nil
			}
		}
	case TypeDateTime:
		if v.kind == jsonString {
			if d, ok := ParseDateTime(v.text); ok {
				return DateTimeValue(d), nil
			}
		}
	case TypeGuid:
		if v.kind == jsonString {
			if g, ok := ParseGuid(v.text); ok {
				return GuidValue(g), nil
			}
		}
	case TypeBinary:
		if v.kind == jsonString {
			// A cheap bound before decoding: 64 KiB takes at most 87,384
			// base64 characters (plus line breaks some encoders insert).
			if len(v.text) > 2*MaxBinaryLength {
				return Value{}, errorf(CodePropertyValueTooLarge, "%s (%s is longer than %d bytes)", msgValueTooLarge, m.name, MaxBinaryLength)
			}
			b, err := base64.StdEncoding.DecodeString(v.text)
			if err == nil {
				return BinaryValue(b), nil
			}
		}
	}
	return Value{}, badValue(m, typ)
}

// isIntegerLiteral reports whether s is an optionally signed run of digits.
func isIntegerLiteral(s string) bool {
	if s != "" && s[0] == '-' {
		s = s[1:]
	}
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// parseFiniteDouble parses a JSON-grammar number (strconv alone would also
// take "inf", hex floats and underscores) and rejects overflow: the service
// refuses doubles beyond ±MaxFloat64 rather than store infinity.
func parseFiniteDouble(s string) (float64, bool) {
	if !isJSONNumber(s) {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// DecodeTableJSON decodes a Create Table body, {"TableName":"name"}, and
// returns the name; checking the name's rules is the caller's job.
func DecodeTableJSON(body []byte) (string, error) {
	sc := jsonScanner{s: string(body)}
	var name string
	found := false
	err := sc.scanObject(func(key string, v jsonValue) error {
		if key != TableNameName {
			return nil
		}
		if found {
			return newError(CodeDuplicatePropertiesSpecified, msgDuplicateProps)
		}
		found = true
		switch v.kind {
		case jsonString:
			name = v.text
			return nil
		case jsonNull:
			return newError(CodePropertiesNeedValue, msgNeedValue+" (TableName is null)")
		}
		return invalidInput("TableName must be a string.")
	})
	if err != nil {
		return "", err
	}
	if !found {
		return "", newError(CodePropertiesNeedValue, msgNeedValue+" (TableName is missing)")
	}
	return name, nil
}
