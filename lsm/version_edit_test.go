package lsm

import (
	"errors"
	"reflect"
	"testing"

	"github.com/tabuladb/tabula/internal/base"
)

func TestVersionEditRoundTrip(t *testing.T) {
	e := &versionEdit{
		formatVersion: manifestFormatVersion,
		logNum:        7,
		nextFileNum:   42,
		lastSeq:       123456,
		deleted:       []deletedFileEntry{{level: 0, fileNum: 3}, {level: 6, fileNum: 9}},
		added: []newFileEntry{{level: 2, meta: &fileMetadata{
			fileNum:     11,
			size:        4096,
			smallest:    base.MakeInternalKey([]byte("a"), 5, base.KindSet),
			largest:     base.MakeInternalKey([]byte("z"), 9, base.KindDelete),
			smallestSeq: 5,
			largestSeq:  9,
		}}},
	}
	got, err := decodeVersionEdit(e.encode())
	if err != nil {
		t.Fatal(err)
	}
	if got.logNum != e.logNum || got.nextFileNum != e.nextFileNum || got.lastSeq != e.lastSeq ||
		got.formatVersion != e.formatVersion || !reflect.DeepEqual(got.deleted, e.deleted) {
		t.Fatalf("decoded %+v, want %+v", got, e)
	}
	a, b := got.added[0].meta, e.added[0].meta
	if got.added[0].level != 2 || a.fileNum != b.fileNum || a.size != b.size ||
		base.InternalCompare(a.smallest, b.smallest) != 0 || base.InternalCompare(a.largest, b.largest) != 0 ||
		a.smallest.Trailer != b.smallest.Trailer || a.smallestSeq != b.smallestSeq || a.largestSeq != b.largestSeq {
		t.Fatalf("decoded file %v, want %v", a, b)
	}
}

func TestVersionEditRejectsGarbage(t *testing.T) {
	good := (&versionEdit{added: []newFileEntry{{level: 1, meta: &fileMetadata{
		fileNum: 1, size: 1,
		smallest: base.MakeInternalKey([]byte("a"), 1, base.KindSet),
		largest:  base.MakeInternalKey([]byte("b"), 1, base.KindSet),
	}}}}).encode()
	for name, b := range map[string][]byte{
		"unknown tag":        {99, 1},
		"level out of range": {tagDeletedFile, 7, 1},
		"truncated":          good[:len(good)-3],
		"newer format":       {tagFormatVersion, manifestFormatVersion + 1},
		"bad varint":         {tagLogNum, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
	} {
		if _, err := decodeVersionEdit(b); !errors.Is(err, ErrCorruption) {
			t.Errorf("%s: err = %v, want ErrCorruption", name, err)
		}
	}
}

func TestFilenamesRoundTrip(t *testing.T) {
	for _, ft := range []fileType{fileTypeLog, fileTypeTable, fileTypeManifest, fileTypeTemp} {
		name := makeFilename("", ft, 1234567)
		got, num := parseFilename(name)
		if got != ft || num != 1234567 {
			t.Errorf("parseFilename(%q) = %v, %d", name, got, num)
		}
	}
	for _, name := range []string{"CURRENT", "LOCK"} {
		if ft, _ := parseFilename(name); ft == fileTypeUnknown {
			t.Errorf("%s not recognised", name)
		}
	}
	for _, name := range []string{"foo", "12.txt", "MANIFEST-x", "x.sst", ".log"} {
		if ft, _ := parseFilename(name); ft != fileTypeUnknown {
			t.Errorf("%q parsed as type %d", name, ft)
		}
	}
}
