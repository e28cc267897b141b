package partition

import (
	"encoding/base64"
	"encoding/binary"
	"hash/crc32"

	"github.com/tabuladb/tabula/odata"
)

// Continuation tokens (docs/keys.md, "Continuation tokens"). Each token is
// the unpadded base64url encoding of
//
//	version (1 byte, tokenVersion) | value bytes | CRC-32C (4 bytes, big-endian)
//
// where the value is a PartitionKey, a RowKey or a table name, and the CRC
// covers the version, a kind byte ('P', 'R' or 'T') and the value; the
// RowKey token's CRC also covers the PartitionKey (as uvarint length and
// bytes), so a NextRowKey only verifies next to the NextPartitionKey it was
// issued with. The tokens are opaque to clients, URL- and header-safe, and
// a decoder accepts only the exact bytes an encoder produces.
const tokenVersion = 1

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Continuation says where the next page of a query starts: the
// x-ms-continuation-NextPartitionKey and -NextRowKey values. The zero value
// means the query is complete.
type Continuation struct {
	NextPartitionKey, NextRowKey string
}

// IsZero reports whether c is the end of a query.
func (c Continuation) IsZero() bool { return c.NextPartitionKey == "" && c.NextRowKey == "" }

// NewContinuation returns the tokens that resume a query at the entity
// (pk, rk) inclusive.
func NewContinuation(pk, rk string) Continuation {
	return Continuation{
		NextPartitionKey: encodeToken('P', nil, pk),
		NextRowKey:       encodeToken('R', []byte(pk), rk),
	}
}

// Position decodes c into the key a query resumes at: the first entity at
// or after (pk, rk). A NextPartitionKey without NextRowKey resumes at the
// start of that partition. Forged, corrupted or mismatched tokens, and a
// NextRowKey alone, are InvalidInput. The zero Continuation is an error
// too: callers check IsZero first.
func (c Continuation) Position() (pk, rk string, err error) {
	if c.NextPartitionKey == "" {
		return "", "", badToken("NextPartitionKey is missing")
	}
	p, ok := decodeToken('P', nil, c.NextPartitionKey)
	if !ok {
		return "", "", badToken("NextPartitionKey is not a valid continuation token")
	}
	if c.NextRowKey == "" {
		return string(p), "", nil
	}
	r, ok := decodeToken('R', p, c.NextRowKey)
	if !ok {
		return "", "", badToken("NextRowKey is not a valid continuation token for this NextPartitionKey")
	}
	return string(p), string(r), nil
}

// EncodeNextTableName returns the NextTableName token that resumes a
// Query Tables at the table called name.
func EncodeNextTableName(name string) string { return encodeToken('T', nil, name) }

// DecodeNextTableName decodes a NextTableName token; anything an encoder
// did not produce is InvalidInput.
func DecodeNextTableName(token string) (string, error) {
	v, ok := decodeToken('T', nil, token)
	if !ok {
		return "", badToken("NextTableName is not a valid continuation token")
	}
	return string(v), nil
}

func badToken(detail string) error {
	return serviceErrorf(odata.CodeInvalidInput, msgInvalidInput, "(%s)", detail)
}

func tokenChecksum(kind byte, bound, value []byte) uint32 {
	h := crc32.Update(0, castagnoli, []byte{tokenVersion, kind})
	if bound != nil {
		h = crc32.Update(h, castagnoli, binary.AppendUvarint(nil, uint64(len(bound))))
		h = crc32.Update(h, castagnoli, bound)
	}
	return crc32.Update(h, castagnoli, value)
}

func encodeToken(kind byte, bound []byte, value string) string {
	raw := make([]byte, 0, len(value)+5)
	raw = append(raw, tokenVersion)
	raw = append(raw, value...)
	raw = binary.BigEndian.AppendUint32(raw, tokenChecksum(kind, bound, []byte(value)))
	return base64.RawURLEncoding.EncodeToString(raw)
}

func decodeToken(kind byte, bound []byte, token string) ([]byte, bool) {
	raw, err := base64.RawURLEncoding.Strict().DecodeString(token)
	if err != nil || len(raw) < 5 || raw[0] != tokenVersion {
		return nil, false
	}
	value := raw[1 : len(raw)-4]
	if binary.BigEndian.Uint32(raw[len(raw)-4:]) != tokenChecksum(kind, bound, value) {
		return nil, false
	}
	// The decoder skips newlines; a canonical token has none, and tokens
	// must round-trip exactly.
	if base64.RawURLEncoding.EncodeToString(raw) != token {
		return nil, false
	}
	return value, true
}
