package batch

import "testing"

func TestParseTarget(t *testing.T) {
	for _, c := range []struct {
		path, account string
		want          Target
	}{
		{"/devstoreaccount1", "devstoreaccount1", Target{Kind: TargetService}},
		{"/devstoreaccount1/", "devstoreaccount1", Target{Kind: TargetService}},
		{"/", "", Target{Kind: TargetService}},
		{"/devstoreaccount1-secondary/", "devstoreaccount1", Target{Kind: TargetService, Secondary: true}},
		{"/devstoreaccount1/Tables", "devstoreaccount1", Target{Kind: TargetTables}},
		{"/devstoreaccount1/Tables()", "devstoreaccount1", Target{Kind: TargetTables}},
		{"/devstoreaccount1/Tables('my%20Table')", "devstoreaccount1", Target{Kind: TargetTable, Table: "my Table"}},
		{"/devstoreaccount1/Tables(%27t1%27)", "devstoreaccount1", Target{Kind: TargetTable, Table: "t1"}},
		{"/devstoreaccount1/$batch", "devstoreaccount1", Target{Kind: TargetBatch}},
		{"/devstoreaccount1/%24batch", "devstoreaccount1", Target{Kind: TargetBatch}},
		{"/devstoreaccount1/t1", "devstoreaccount1", Target{Kind: TargetEntitySet, Table: "t1"}},
		{"/devstoreaccount1/t1()", "devstoreaccount1", Target{Kind: TargetEntitySet, Table: "t1"}},
		{"/t1()", "", Target{Kind: TargetEntitySet, Table: "t1"}},
		{"/devstoreaccount1/t1(PartitionKey='p',RowKey='r')", "devstoreaccount1", Target{Kind: TargetEntity, Table: "t1", PartitionKey: "p", RowKey: "r"}},
		{"/devstoreaccount1/t1(PartitionKey='',RowKey='')", "devstoreaccount1", Target{Kind: TargetEntity, Table: "t1"}},
		{"/devstoreaccount1/t1(RowKey='r',PartitionKey='p')", "devstoreaccount1", Target{Kind: TargetEntity, Table: "t1", PartitionKey: "p", RowKey: "r"}},
		{"/devstoreaccount1/t1(PartitionKey='it''s',RowKey='a''''b')", "devstoreaccount1", Target{Kind: TargetEntity, Table: "t1", PartitionKey: "it's", RowKey: "a''b"}},
		{"/devstoreaccount1/t1(PartitionKey='it%27%27s%20%25',RowKey='%2F%23%3F')", "devstoreaccount1", Target{Kind: TargetEntity, Table: "t1", PartitionKey: "it's %", RowKey: "/#?"}},
		{"/devstoreaccount1/t1(PartitionKey='a,b=c)',RowKey='(x)')", "devstoreaccount1", Target{Kind: TargetEntity, Table: "t1", PartitionKey: "a,b=c)", RowKey: "(x)"}},
		{"/devstoreaccount1/t1(PartitionKey = 'p' , RowKey= 'r' )", "devstoreaccount1", Target{Kind: TargetEntity, Table: "t1", PartitionKey: "p", RowKey: "r"}},
		{"/devstoreaccount1/t1%28PartitionKey%3D%27p%27%2CRowKey%3D%27r%27%29", "devstoreaccount1", Target{Kind: TargetEntity, Table: "t1", PartitionKey: "p", RowKey: "r"}},
		{"/devstoreaccount1/t1(PartitionKey='caf%C3%A9',RowKey='日本')", "devstoreaccount1", Target{Kind: TargetEntity, Table: "t1", PartitionKey: "café", RowKey: "日本"}},
	} {
		got, err := ParseTarget(c.path, c.account)
		if err != nil || got != c.want {
			t.Errorf("ParseTarget(%q, %q) = %+v, %v; want %+v", c.path, c.account, got, err, c.want)
		}
	}
}

func TestParseTargetErrors(t *testing.T) {
	for _, c := range []struct{ path, account string }{
		{"", ""},
		{"devstoreaccount1/t1", "devstoreaccount1"},
		{"/otheraccount/t1", "devstoreaccount1"},
		{"/devstoreaccount1/t1/extra", "devstoreaccount1"},
		{"/devstoreaccount1/a/b/c", "devstoreaccount1"},
		{"/devstoreaccount1/t1%zz", "devstoreaccount1"},
		{"/%zz/t1", "devstoreaccount1"},
		{"/devstoreaccount1/(PartitionKey='p',RowKey='r')", "devstoreaccount1"},
		{"/devstoreaccount1/t1(PartitionKey='p',RowKey='r'", "devstoreaccount1"},
		{"/devstoreaccount1/t1)", "devstoreaccount1"},
		{"/devstoreaccount1/t1(PartitionKey='p')", "devstoreaccount1"},
		{"/devstoreaccount1/t1(RowKey='r')", "devstoreaccount1"},
		{"/devstoreaccount1/t1(PartitionKey='p',RowKey='r',Other='x')", "devstoreaccount1"},
		{"/devstoreaccount1/t1(PartitionKey='p',PartitionKey='q',RowKey='r')", "devstoreaccount1"},
		{"/devstoreaccount1/t1(PartitionKey='p',RowKey='r',RowKey='s')", "devstoreaccount1"},
		{"/devstoreaccount1/t1(PartitionKey=p,RowKey='r')", "devstoreaccount1"},
		{"/devstoreaccount1/t1(PartitionKey='p,RowKey='r')", "devstoreaccount1"},
		{"/devstoreaccount1/t1(PartitionKey='p' RowKey='r')", "devstoreaccount1"},
		{"/devstoreaccount1/t1(PartitionKey='p',)", "devstoreaccount1"},
		{"/devstoreaccount1/t1('p','r')", "devstoreaccount1"},
		{"/devstoreaccount1/Tables('')", "devstoreaccount1"},
		{"/devstoreaccount1/Tables(t1)", "devstoreaccount1"},
		{"/devstoreaccount1/Tables('t1')x", "devstoreaccount1"},
	} {
		got, err := ParseTarget(c.path, c.account)
		var e *Error
		if !asError(err, &e) || e.Status != 400 || e.Code != CodeInvalidURI {
			t.Errorf("ParseTarget(%q, %q) = %+v, %v; want 400 InvalidUri", c.path, c.account, got, err)
		}
	}
}
