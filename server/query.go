package server

import (
	"errors"
	"net/http"

	"github.com/tabuladb/tabula/partition"
)

// maxPageBytes bounds the JSON of one query page. The service pages at
// 1,000 entities; with entities of up to 1 MiB that could be a gigabyte
// held for one response, so a page also ends, with a continuation, once it
// has grown past this.
const maxPageBytes = 8 << 20

// pooledPageCap is the largest page buffer Server.pages keeps: pages of
// large entities are left to the GC rather than pinned.
const pooledPageCap = 1 << 20

// errPageFull stops a page that reached maxPageBytes.
var errPageFull = errors.New("server: page full")

// queryEntities answers GET /t() with $filter, $select, $top and the
// continuation parameters: one page, in (PartitionKey, RowKey) order,
// with x-ms-continuation-NextPartitionKey / -NextRowKey when there is more.
func (s *Server) queryEntities(rq *request) error {
	m, err := rq.metadata()
	if err != nil {
		return err
	}
	sel, err := selection(rq)
	if err != nil {
		return err
	}
	q := partition.EntityQuery{
		Filter:           rq.query.Get("$filter"),
		NextPartitionKey: rq.query.Get("NextPartitionKey"),
		NextRowKey:       rq.query.Get("NextRowKey"),
	}
	q.Scope, _ = rq.principal.KeyRange()
	var empty bool
	if q.Top, empty, err = rq.top(); err != nil {
		return err
	}

	page, _ := s.pages.Get().(*[]byte)
	if page == nil {
		page = new([]byte)
	}
	feed := rq.encoder(m, sel).NewEntityFeedBuffer((*page)[:0])
	defer func() {
		if buf := feed.Bytes(); cap(buf) <= pooledPageCap {
			*page = buf[:0]
			s.pages.Put(page)
		}
	}()
	var next, stop partition.Continuation
	if empty {
		// $top=0 is a valid query with no entities; the table must still exist.
		_, err = s.store.GetTable(rq.ctx, rq.account, rq.target.Table)
	} else {
		next, err = s.store.QueryEntities(rq.ctx, rq.account, rq.target.Table, q, func(e *partition.StoredEntity) error {
			if feed.Len() > 0 && len(feed.Bytes()) >= maxPageBytes {
				stop = partition.NewContinuation(e.PartitionKey, e.RowKey)
				return errPageFull
			}
			// The encoder derives the ETag, and only at the metadata
			// levels that show it.
			return feed.WriteEntity([]byte(e.PartitionKey), []byte(e.RowKey), "", e.Value)
		})
		if errors.Is(err, errPageFull) {
			next, err = stop, nil
		}
	}
	if err != nil {
		return err
	}
	if err := feed.Close(); err != nil {
		return err
	}
	if !next.IsZero() {
		rq.setHeader("X-Ms-Continuation-Nextpartitionkey", next.NextPartitionKey)
		if next.NextRowKey != "" {
			rq.setHeader("X-Ms-Continuation-Nextrowkey", next.NextRowKey)
		}
	}
	rq.setHeader(hdrDataServiceVersion, "3.0;")
	rq.reply(http.StatusOK, jsonContentType(m), feed.Bytes())
	return nil
}
