package partition

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/odata"
)

func TestErrorCodes(t *testing.T) {
	for code, status := range map[string]int{
		CodeTableNotFound: 404, CodeResourceNotFound: 404,
		CodeTableAlreadyExists: 409, CodeEntityAlreadyExists: 409,
		CodeUpdateConditionNotSatisfied: 412, CodeRequestBodyTooLarge: 413,
		CodeInvalidDuplicateRow: 400, CodeCommandsInBatchActOnDifferentPartitions: 400,
		CodeInvalidResourceName: 400, CodeOutOfRangeInput: 400, CodeInvalidInput: 400,
		CodeInvalidXMLDocument: 400, odata.CodeEntityTooLarge: 400, odata.CodeKeyValueTooLarge: 400,
		"": 500, "SomethingElse": 500,
	} {
		if got := HTTPStatus(code); got != status {
			t.Errorf("HTTPStatus(%q) = %d, want %d", code, got, status)
		}
	}
	inner := serviceError(CodeEntityAlreadyExists, msgEntityAlreadyExists)
	var err error = &BatchError{Index: 3, Err: inner}
	err = fmt.Errorf("wrapped: %w", err)
	if ErrorCode(err) != CodeEntityAlreadyExists || !IsCode(err, CodeEntityAlreadyExists) {
		t.Fatalf("code through BatchError: %q", ErrorCode(err))
	}
	var be *BatchError
	if !errors.As(err, &be) || be.Index != 3 {
		t.Fatal("BatchError not found")
	}
	if ErrorCode(fmt.Errorf("partition: read: %w", lsm.ErrCorruption)) != "" {
		t.Fatal("a storage failure carries a service code")
	}
}
