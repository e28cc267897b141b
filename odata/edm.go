package odata

// Type is an Edm primitive type of the table service. The numeric values are
// the type tags of the stored entity encoding (docs/entity-encoding.md), so
// they must never be renumbered.
type Type uint8

// The Edm types an entity property can have.
const (
	TypeString   Type = 1
	TypeInt32    Type = 2
	TypeInt64    Type = 3
	TypeDouble   Type = 4
	TypeBoolean  Type = 5
	TypeDateTime Type = 6
	TypeGuid     Type = 7
	TypeBinary   Type = 8
)

var typeNames = [...]string{
	TypeString:   "Edm.String",
	TypeInt32:    "Edm.Int32",
	TypeInt64:    "Edm.Int64",
	TypeDouble:   "Edm.Double",
	TypeBoolean:  "Edm.Boolean",
	TypeDateTime: "Edm.DateTime",
	TypeGuid:     "Edm.Guid",
	TypeBinary:   "Edm.Binary",
}

// Valid reports whether t is one of the Edm types above.
func (t Type) Valid() bool { return t >= TypeString && t <= TypeBinary }

// String returns the Edm name of t, as used in @odata.type annotations.
func (t Type) String() string {
	if t.Valid() {
		return typeNames[t]
	}
	return "Edm.Invalid"
}

// ParseTypeName maps an @odata.type annotation value to a Type. The names are
// case-sensitive, as OData type names are.
func ParseTypeName(name string) (Type, bool) {
	for t := TypeString; t <= TypeBinary; t++ {
		if typeNames[t] == name {
			return t, true
		}
	}
	return 0, false
}
