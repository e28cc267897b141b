package server

import (
	"bytes"
	"net/http"

	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
)

// queryTables answers GET /Tables: one page of the account's tables,
// with x-ms-continuation-NextTableName when there are more.
func (s *Server) queryTables(rq *request) error {
	m, err := rq.metadata()
	if err != nil {
		return err
	}
	q := partition.TableQuery{Filter: rq.query.Get("$filter"), NextTableName: rq.query.Get("NextTableName")}
	var empty bool
	if q.Top, empty, err = rq.top(); err != nil {
		return err
	}
	var page partition.TablePage
	if !empty {
		if page, err = s.store.QueryTables(rq.ctx, rq.account, q); err != nil {
			return err
		}
	}
	var body bytes.Buffer
	feed := rq.encoder(m, nil).NewTableFeed(&body)
	for _, t := range page.Tables {
		if err := feed.WriteTable(t.Name); err != nil {
			return err
		}
	}
	if err := feed.Close(); err != nil {
		return err
	}
	if page.NextTableName != "" {
		rq.setHeader("X-Ms-Continuation-Nexttablename", page.NextTableName)
	}
	rq.setHeader(hdrDataServiceVersion, "3.0;")
	rq.reply(http.StatusOK, jsonContentType(m), body.Bytes())
	return nil
}

// createTable answers POST /Tables with {"TableName":"name"}.
func (s *Server) createTable(rq *request) error {
	m, err := rq.metadata()
	if err != nil {
		return err
	}
	body, err := rq.readBody()
	if err != nil {
		return err
	}
	name, err := odata.DecodeTableJSON(body)
	if err != nil {
		return err
	}
	t, err := s.store.CreateTable(rq.ctx, rq.account, name)
	if err != nil {
		return err
	}
	return rq.replyCreated(rq.baseURL()+"Tables('"+escapeKey(t.Name)+"')", m, func() ([]byte, error) {
		return rq.encoder(m, nil).AppendTableResponse(nil, t.Name), nil
	})
}

// getTable answers GET /Tables('name').
func (s *Server) getTable(rq *request) error {
	m, err := rq.metadata()
	if err != nil {
		return err
	}
	t, err := s.store.GetTable(rq.ctx, rq.account, rq.target.Table)
	if err != nil {
		return err
	}
	rq.setHeader(hdrDataServiceVersion, "3.0;")
	rq.reply(http.StatusOK, jsonContentType(m), rq.encoder(m, nil).AppendTableResponse(nil, t.Name))
	return nil
}

// deleteTable answers DELETE /Tables('name').
func (s *Server) deleteTable(rq *request) error {
	if err := s.store.DeleteTable(rq.ctx, rq.account, rq.target.Table); err != nil {
		return err
	}
	rq.reply(http.StatusNoContent, "", nil)
	return nil
}
