package main

import "testing"

// FuzzIdentity feeds garbage to the CLUSTER file's parser
// (docs/cluster-files.md): no input panics, and an identity it accepts
// encodes into a file that parses alike.
func FuzzIdentity(f *testing.F) {
	f.Add([]byte("cluster 0123456789abcdef0123456789abcdef\nnode 2\n"))
	f.Add([]byte("cluster c\nnode 3\nremoved\n"))
	f.Add([]byte("cluster \nnode 0\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		id, ok := parseIdentity(raw)
		if !ok {
			return
		}
		if id.node == 0 {
			t.Fatal("node 0 accepted")
		}
		again, ok := parseIdentity(id.encode())
		if !ok || again != id {
			t.Fatalf("identity %+v reads back as %+v (%v)", id, again, ok)
		}
	})
}
