package auth

import (
	"net/http"
	"strings"

	"github.com/tabuladb/tabula/odata"
)

// Kind is how a caller proved who it is.
type Kind uint8

// The kinds of credential.
const (
	KindSharedKey Kind = iota + 1
	KindSharedKeyLite
	KindServiceSAS
	KindAccountSAS
	KindBearer // a Microsoft Entra ID token (see AuthenticateBearer)
)

func (k Kind) String() string {
	switch k {
	case KindSharedKey:
		return "SharedKey"
	case KindSharedKeyLite:
		return "SharedKeyLite"
	case KindServiceSAS:
		return "ServiceSAS"
	case KindAccountSAS:
		return "AccountSAS"
	case KindBearer:
		return "Bearer"
	}
	return "Kind(?)"
}

// Operation is a Table service operation, as far as authorization cares.
type Operation uint8

// The operations. Entity operations inside a $batch are checked one by one
// with the operation they perform; OpBatch is the envelope.
const (
	OpQueryTables Operation = iota + 1
	OpCreateTable
	OpDeleteTable
	OpQueryEntities
	OpGetEntity // point query: GET /table(PartitionKey=..,RowKey=..)
	OpInsertEntity
	OpUpdateEntity          // PUT with If-Match
	OpMergeEntity           // MERGE/PATCH with If-Match
	OpInsertOrReplaceEntity // PUT without If-Match
	OpInsertOrMergeEntity   // MERGE/PATCH without If-Match
	OpDeleteEntity
	OpGetTableACL
	OpSetTableACL
	OpGetServiceProperties
	OpSetServiceProperties
	OpGetServiceStats
	OpBatch
)

var opNames = [...]string{
	OpQueryTables: "QueryTables", OpCreateTable: "CreateTable", OpDeleteTable: "DeleteTable",
	OpQueryEntities: "QueryEntities", OpGetEntity: "GetEntity", OpInsertEntity: "InsertEntity",
	OpUpdateEntity: "UpdateEntity", OpMergeEntity: "MergeEntity", OpInsertOrReplaceEntity: "InsertOrReplaceEntity",
	OpInsertOrMergeEntity: "InsertOrMergeEntity", OpDeleteEntity: "DeleteEntity", OpGetTableACL: "GetTableACL",
	OpSetTableACL: "SetTableACL", OpGetServiceProperties: "GetServiceProperties",
	OpSetServiceProperties: "SetServiceProperties", OpGetServiceStats: "GetServiceStats", OpBatch: "Batch",
}

func (o Operation) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return "Operation(?)"
}

// Principal is an authenticated caller of one account. It is immutable and
// safe for concurrent use.
type Principal struct {
	Account string
	Kind    Kind
	Version string // the SAS's signed version (sv); "" for Shared Key

	// Service SAS.
	table    string // lower case
	keyRange odata.KeyRange
	hasRange bool

	// Account SAS.
	services, resources letters

	perms letters // both SAS kinds
}

// String describes the principal without secrets, for logs.
func (p *Principal) String() string {
	switch p.Kind {
	case KindServiceSAS:
		s := "ServiceSAS(" + p.Account + ", table=" + p.table + ", sp=" + p.perms.String()
		if p.hasRange {
			s += ", keys=" + p.keyRange.String()
		}
		return s + ")"
	case KindAccountSAS:
		return "AccountSAS(" + p.Account + ", ss=" + p.services.String() + ", srt=" + p.resources.String() + ", sp=" + p.perms.String() + ")"
	}
	return p.Kind.String() + "(" + p.Account + ")"
}

func (l letters) String() string {
	var b strings.Builder
	for c := byte('a'); c <= 'z'; c++ {
		if l.has(c) {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// IsSAS reports whether the caller holds a shared access signature rather
// than the account key.
func (p *Principal) IsSAS() bool { return p.Kind == KindServiceSAS || p.Kind == KindAccountSAS }

// Table returns the table a service SAS is for (lower case), or "".
func (p *Principal) Table() string { return p.table }

// CanDo reports whether the principal may perform op on table (the table
// name as addressed; "" for service-level operations and for the $batch
// envelope). The handlers call it once per request and, for a batch, once
// per sub-operation with that operation's table. The errors are the
// service's (sas-error-codes): AuthorizationPermissionMismatch for a missing
// permission, AuthorizationResourceTypeMismatch for an operation a SAS of
// this kind cannot grant, AuthorizationServiceMismatch for an account SAS
// without the table service, AuthorizationFailure for another table and for
// access control lists.
func (p *Principal) CanDo(op Operation, table string) error {
	switch p.Kind {
	case KindSharedKey, KindSharedKeyLite:
		return nil
	case KindBearer:
		// Entra ID grants by role, which a development store does not
		// model: every operation is allowed but the ACL ones, which the
		// service answers as if they did not exist (it never lets a token
		// read or change who holds a SAS).
		if op == OpGetTableACL || op == OpSetTableACL {
			return &Error{Status: http.StatusNotFound, Code: "ResourceNotFound", Message: "The specified resource does not exist.",
				Detail: "Table ACLs cannot be read or set with a bearer token."}
		}
		return nil
	case KindServiceSAS:
		return p.serviceSASCanDo(op, table)
	case KindAccountSAS:
		return p.accountSASCanDo(op)
	}
	return forbidden(CodeAuthorizationFailure, msgAuthorizationFailure, "unknown credential kind")
}

// need lists, per operation, what a SAS must grant: for a service SAS the
// permissions (all of them), for an account SAS the resource type and the
// permissions (all of "all", or any of "any").
type need struct {
	table       string // service SAS: every letter required; "" = not grantable
	resource    byte   // account SAS resource type: 's', 'c', 'o'
	all, any    string // account SAS permissions
	aclDenied   bool   // ACL operations: AuthorizationFailure for every SAS
	envelopeAny bool   // $batch: the sub-operations are checked one by one
}

// needs follows the permission tables of create-service-sas ("Permissions
// for a table") and create-account-sas ("Table service"): upserts need add
// and update, table creation create or write.
var needs = [...]need{
	OpQueryTables:           {resource: 'c', all: "l"},
	OpCreateTable:           {resource: 'c', any: "cw"},
	OpDeleteTable:           {resource: 'c', all: "d"},
	OpQueryEntities:         {table: "r", resource: 'o', all: "r"},
	OpGetEntity:             {table: "r", resource: 'o', all: "r"},
	OpInsertEntity:          {table: "a", resource: 'o', all: "a"},
	OpUpdateEntity:          {table: "u", resource: 'o', all: "u"},
	OpMergeEntity:           {table: "u", resource: 'o', all: "u"},
	OpInsertOrReplaceEntity: {table: "au", resource: 'o', all: "au"},
	OpInsertOrMergeEntity:   {table: "au", resource: 'o', all: "au"},
	OpDeleteEntity:          {table: "d", resource: 'o', all: "d"},
	OpGetTableACL:           {aclDenied: true},
	OpSetTableACL:           {aclDenied: true},
	OpGetServiceProperties:  {resource: 's', all: "r"},
	OpSetServiceProperties:  {resource: 's', all: "w"},
	OpGetServiceStats:       {resource: 's', all: "r"},
	OpBatch:                 {envelopeAny: true},
}

func lookupNeed(op Operation) (need, bool) {
	if op == 0 || int(op) >= len(needs) {
		return need{}, false
	}
	return needs[op], true
}

func (p *Principal) serviceSASCanDo(op Operation, table string) error {
	n, ok := lookupNeed(op)
	if !ok {
		return forbidden(CodeAuthorizationFailure, msgAuthorizationFailure, "unknown operation")
	}
	if n.aclDenied {
		return forbidden(CodeAuthorizationFailure, msgAuthorizationFailure, "A shared access signature cannot read or change access control lists.")
	}
	if n.envelopeAny {
		if table != "" && !strings.EqualFold(table, p.table) {
			return forbidden(CodeAuthorizationFailure, msgAuthorizationFailure, "The SAS is for another table.")
		}
		return nil
	}
	if n.table == "" {
		return forbidden(CodeAuthorizationResourceTypeMismatch, msgResourceTypeMismatch, "A table SAS grants entity operations only; "+op.String()+" needs an account SAS.")
	}
	if !strings.EqualFold(table, p.table) {
		return forbidden(CodeAuthorizationFailure, msgAuthorizationFailure, "The SAS is for another table.")
	}
	for i := 0; i < len(n.table); i++ {
		if !p.perms.has(n.table[i]) {
			return forbidden(CodeAuthorizationPermissionMismatch, msgPermissionMismatch, op.String()+" needs permissions '"+n.table+"'.")
		}
	}
	return nil
}

func (p *Principal) accountSASCanDo(op Operation) error {
	n, ok := lookupNeed(op)
	if !ok {
		return forbidden(CodeAuthorizationFailure, msgAuthorizationFailure, "unknown operation")
	}
	if !p.services.has('t') {
		return forbidden(CodeAuthorizationServiceMismatch, msgServiceMismatch, "The account SAS does not include the table service (ss).")
	}
	if n.aclDenied {
		return forbidden(CodeAuthorizationFailure, msgAuthorizationFailure, "A shared access signature cannot read or change access control lists.")
	}
	if n.envelopeAny {
		return nil
	}
	if !p.resources.has(n.resource) {
		return forbidden(CodeAuthorizationResourceTypeMismatch, msgResourceTypeMismatch, op.String()+" needs resource type '"+string(n.resource)+"' (srt).")
	}
	for i := 0; i < len(n.all); i++ {
		if !p.perms.has(n.all[i]) {
			return forbidden(CodeAuthorizationPermissionMismatch, msgPermissionMismatch, op.String()+" needs permissions '"+n.all+"'.")
		}
	}
	if n.any != "" {
		for i := 0; i < len(n.any); i++ {
			if p.perms.has(n.any[i]) {
				return nil
			}
		}
		return forbidden(CodeAuthorizationPermissionMismatch, msgPermissionMismatch, op.String()+" needs one of the permissions '"+n.any+"'.")
	}
	return nil
}

// KeyRange returns the entity range a service SAS is limited to, and false
// when the principal may see every key.
func (p *Principal) KeyRange() (odata.KeyRange, bool) {
	if !p.hasRange {
		return odata.FullRange, false
	}
	return p.keyRange, true
}

// CheckKey refuses an entity outside the SAS's key range with 403
// AuthorizationFailure: writes outside the range fail (create-service-sas),
// and so does a point read of such an entity.
func (p *Principal) CheckKey(partitionKey, rowKey string) error {
	if !p.hasRange || p.keyRange.Contains([]byte(partitionKey), []byte(rowKey)) {
		return nil
	}
	return &Error{Status: http.StatusForbidden, Code: CodeAuthorizationFailure, Message: msgAuthorizationFailure,
		Detail: "The entity's keys are outside the SAS's key range (spk, srk, epk, erk)."}
}
