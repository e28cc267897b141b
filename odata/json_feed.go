package odata

import (
	"errors"
	"io"
)

// feedFlushSize is how much a FeedWriter buffers before writing: large enough
// that a page of small entities goes out in a few writes.
const feedFlushSize = 32 << 10

// FeedWriter streams a query response, {"odata.metadata":…,"value":[…]},
// one element at a time, so a page of up to 1,000 entities never has to be
// held as a whole; or builds it in one buffer (NewEntityFeedBuffer).
type FeedWriter struct {
	enc    *Encoder
	w      io.Writer // nil: the feed is built in buf, whole
	buf    []byte
	tables bool
	n      int
	closed bool
	err    error
}

// NewEntityFeed starts a Query Entities response on w.
func (e *Encoder) NewEntityFeed(w io.Writer) *FeedWriter {
	return e.newEntityFeed(w, make([]byte, 0, 4096))
}

// NewEntityFeedBuffer starts a Query Entities response built in memory,
// appended to buf (grown as needed), for a caller that sends a page whole:
// Bytes returns it after Close. With a buffer kept from earlier pages,
// the page is built where it will be sent from, without growing a buffer
// and copying it into another.
func (e *Encoder) NewEntityFeedBuffer(buf []byte) *FeedWriter {
	return e.newEntityFeed(nil, buf)
}

func (e *Encoder) newEntityFeed(w io.Writer, buf []byte) *FeedWriter {
	f := &FeedWriter{enc: e, w: w, buf: buf}
	f.buf = append(f.buf, '{')
	if e.opts.Metadata != NoMetadata {
		f.buf = append(f.buf, `"odata.metadata":`...)
		f.buf = appendJSONString(f.buf, e.metadataURL)
		f.buf = append(f.buf, ',')
	}
	f.buf = append(f.buf, `"value":[`...)
	return f
}

// NewTableFeed starts a Query Tables response on w.
func (e *Encoder) NewTableFeed(w io.Writer) *FeedWriter {
	f := &FeedWriter{enc: e, w: w, buf: make([]byte, 0, 1024), tables: true}
	f.buf = append(f.buf, '{')
	if e.opts.Metadata != NoMetadata {
		f.buf = append(f.buf, `"odata.metadata":`...)
		f.buf = appendJSONString(f.buf, e.base+"$metadata#Tables")
		f.buf = append(f.buf, ',')
	}
	f.buf = append(f.buf, `"value":[`...)
	return f
}

var errFeedState = errors.New("odata: feed writer used after Close or for the wrong kind of feed")

// WriteEntity adds one entity to an entity feed (see Encoder.AppendEntity).
// A corrupt stored value is reported and nothing of it is written.
func (f *FeedWriter) WriteEntity(pk, rk []byte, etag string, stored []byte) error {
	if f.err != nil {
		return f.err
	}
	if f.closed || f.tables {
		return errFeedState
	}
	mark := len(f.buf)
	if f.n > 0 {
		f.buf = append(f.buf, ',')
	}
	out, err := f.enc.AppendEntity(f.buf, pk, rk, etag, stored)
	if err != nil {
		f.buf = f.buf[:mark]
		return err
	}
	f.buf = out
	f.n++
	return f.maybeFlush()
}

// WriteTable adds one table to a tables feed.
func (f *FeedWriter) WriteTable(name string) error {
	if f.err != nil {
		return f.err
	}
	if f.closed || !f.tables {
		return errFeedState
	}
	if f.n > 0 {
		f.buf = append(f.buf, ',')
	}
	f.buf = f.enc.appendTable(f.buf, name, false)
	f.n++
	return f.maybeFlush()
}

// Len returns the number of elements written so far.
func (f *FeedWriter) Len() int { return f.n }

// Bytes returns the feed built so far by a NewEntityFeedBuffer writer:
// the whole response once Close has returned. It aliases the writer's
// buffer.
func (f *FeedWriter) Bytes() []byte { return f.buf }

func (f *FeedWriter) maybeFlush() error {
	if len(f.buf) < feedFlushSize {
		return nil
	}
	return f.flush()
}

func (f *FeedWriter) flush() error {
	if f.w == nil {
		return nil // built in memory: nothing to flush to
	}
	if _, err := f.w.Write(f.buf); err != nil {
		f.err = err
		return err
	}
	f.buf = f.buf[:0]
	return nil
}

// Close ends the feed and writes what is buffered.
func (f *FeedWriter) Close() error {
	if f.err != nil {
		return f.err
	}
	if f.closed {
		return nil
	}
	f.closed = true
	f.buf = append(f.buf, "]}"...)
	return f.flush()
}
