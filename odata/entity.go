package odata

import (
	"unicode"
	"unicode/utf8"
)

// Limits of the table service (Understanding the Table service data model;
// Scalability targets for Table storage). Lengths of names and strings are in
// UTF-16 code units, because the service counts .NET characters.
const (
	MaxCustomProperties   = 252     // 255 including PartitionKey, RowKey, Timestamp
	MaxPropertyNameLength = 255     // UTF-16 code units
	MaxStringLength       = 32768   // UTF-16 code units: 64 KiB as UTF-16
	MaxBinaryLength       = 65536   // bytes
	MaxKeyLength          = 1024    // UTF-16 code units, PartitionKey and RowKey each
	MaxEntitySize         = 1 << 20 // bytes, by EntitySize's formula
)

// Names of the system properties.
const (
	PartitionKeyName = "PartitionKey"
	RowKeyName       = "RowKey"
	TimestampName    = "Timestamp"
	TableNameName    = "TableName"
)

// Entity is a table entity: its key, its server-set Timestamp and its custom
// properties in the order they were written.
type Entity struct {
	PartitionKey string
	RowKey       string
	Timestamp    DateTime
	Properties   []Property
}

// Get returns the custom property called name.
func (e *Entity) Get(name string) (Value, bool) {
	for i := range e.Properties {
		if e.Properties[i].Name == name {
			return e.Properties[i].Value, true
		}
	}
	return Value{}, false
}

// utf16Len counts s in UTF-16 code units; invalid UTF-8 bytes count one each.
func utf16Len(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			n++
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
		i += size
	}
	return n
}

// ValidateKey checks a PartitionKey or RowKey value (kind names which, for
// the message): at most 1,024 characters, and none of / \ # ? or the control
// characters U+0000–U+001F and U+007F–U+009F, which the service forbids in
// key fields. The empty string is a valid key.
func ValidateKey(kind, value string) error {
	if utf16Len(value) > MaxKeyLength {
		return newError(CodeKeyValueTooLarge, msgKeyValueTooLarge+" ("+kind+" is longer than 1024 characters)")
	}
	for _, r := range value {
		if r == '/' || r == '\\' || r == '#' || r == '?' || r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			return errorf(CodeOutOfRangeInput, msgOutOfRangeTemplate, kind, value)
		}
	}
	return nil
}

// ValidatePropertyName checks a custom property name: 1 to 255 characters
// following the rules for C# identifiers, which the service requires (a
// letter or underscore first, then letters, digits, underscores, combining
// and formatting characters). System property names are not custom names.
func ValidatePropertyName(name string) error {
	if name == "" {
		return newError(CodePropertyNameInvalid, msgNameInvalid+" (empty name)")
	}
	if utf16Len(name) > MaxPropertyNameLength {
		return newError(CodePropertyNameTooLong, msgNameTooLong)
	}
	if !isIdentifier(name) {
		return errorf(CodePropertyNameInvalid, "%s (%q)", msgNameInvalid, name)
	}
	if name == PartitionKeyName || name == RowKeyName || name == TimestampName {
		return errorf(CodePropertyNameInvalid, "%s (%q is a system property)", msgNameInvalid, name)
	}
	return nil
}

// isIdentifier reports whether s is a C# identifier (without the @ prefix).
func isIdentifier(s string) bool {
	for i, r := range s {
		if r < utf8.RuneSelf {
			c := byte(r)
			if c == '_' || (c|0x20 >= 'a' && c|0x20 <= 'z') || (i > 0 && c >= '0' && c <= '9') {
				continue
			}
			return false
		}
		if r == utf8.RuneError {
			return false
		}
		if unicode.In(r, unicode.Lu, unicode.Ll, unicode.Lt, unicode.Lm, unicode.Lo, unicode.Nl) {
			continue
		}
		if i > 0 && unicode.In(r, unicode.Mn, unicode.Mc, unicode.Nd, unicode.Pc, unicode.Cf) {
			continue
		}
		return false
	}
	return true
}

// EntitySize is the service's documented size of an entity:
// 4 + 2·len(PartitionKey+RowKey) + Σ over properties of
// (8 + 2·len(name) + size of the value), where a string is 2·len + 4, binary
// len + 4, Int32 4, Int64, Double and DateTime 8, Boolean 1 and Guid 16.
// Lengths are in UTF-16 code units. Timestamp counts as a DateTime property.
func EntitySize(e *Entity) int {
	n := 4 + 2*(utf16Len(e.PartitionKey)+utf16Len(e.RowKey))
	n += 8 + 2*len(TimestampName) + 8
	for i := range e.Properties {
		p := &e.Properties[i]
		n += 8 + 2*utf16Len(p.Name) + valueSize(p.Value)
	}
	return n
}

func valueSize(v Value) int {
	switch v.t {
	case TypeString:
		return 2*utf16Len(v.s) + 4
	case TypeBinary:
		return len(v.s) + 4
	case TypeInt32:
		return 4
	case TypeBoolean:
		return 1
	case TypeGuid:
		return 16
	}
	return 8
}

// checkValue enforces the per-value limits: string and binary sizes and the
// DateTime range.
func checkValue(name string, v Value) error {
	switch v.t {
	case TypeString:
		// Cheap bound first: fewer bytes than the limit means fewer units.
		if len(v.s) > MaxStringLength && utf16Len(v.s) > MaxStringLength {
			return errorf(CodePropertyValueTooLarge, "%s (%s is longer than %d characters)", msgValueTooLarge, name, MaxStringLength)
		}
	case TypeBinary:
		if len(v.s) > MaxBinaryLength {
			return errorf(CodePropertyValueTooLarge, "%s (%s is longer than %d bytes)", msgValueTooLarge, name, MaxBinaryLength)
		}
	case TypeDateTime:
		if !v.DateTime().Valid() {
			return errorf(CodeOutOfRangeInput, msgOutOfRangeTemplate, name, v.DateTime().String())
		}
	case TypeGuid:
		if len(v.s) != 16 {
			return invalidInput("malformed Guid value for " + name)
		}
	case TypeInt32, TypeInt64, TypeDouble, TypeBoolean:
	default:
		return newError(CodeInvalidValueType, msgInvalidValueType+" (property "+name+" has no type)")
	}
	return nil
}

// ValidateEntity checks everything the service checks about an entity that is
// about to be stored: its keys, its property names (unique, valid), the number
// of properties, each value and the total size. The partition layer calls it
// after merges, which can grow an entity past the limits.
func ValidateEntity(e *Entity) error {
	if err := ValidateKey(PartitionKeyName, e.PartitionKey); err != nil {
		return err
	}
	if err := ValidateKey(RowKeyName, e.RowKey); err != nil {
		return err
	}
	if len(e.Properties) > MaxCustomProperties {
		return newError(CodeTooManyProperties, msgTooManyProperties)
	}
	for i := range e.Properties {
		p := &e.Properties[i]
		if err := ValidatePropertyName(p.Name); err != nil {
			return err
		}
		if err := checkValue(p.Name, p.Value); err != nil {
			return err
		}
	}
	if hasDuplicateNames(e.Properties) {
		return newError(CodeDuplicatePropertiesSpecified, msgDuplicateProps)
	}
	if EntitySize(e) > MaxEntitySize {
		return newError(CodeEntityTooLarge, msgEntityTooLarge)
	}
	return nil
}

// hasDuplicateNames is quadratic for the usual handful of properties and
// uses a set beyond that.
func hasDuplicateNames(props []Property) bool {
	if len(props) <= 32 {
		for i := 1; i < len(props); i++ {
			for j := 0; j < i; j++ {
				if props[i].Name == props[j].Name {
					return true
				}
			}
		}
		return false
	}
	seen := make(map[string]struct{}, len(props))
	for i := range props {
		if _, ok := seen[props[i].Name]; ok {
			return true
		}
		seen[props[i].Name] = struct{}{}
	}
	return false
}
