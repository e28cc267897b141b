// Package cluster replicates the table service across nodes with etcd's
// raft (docs/cluster.md): a node's loop drives a raft group whose log
// carries the table service's writes as commands, every replica applies
// them to its own partition.Store, and the leader answers reads after a
// ReadIndex round.
package cluster

import _ "go.etcd.io/raft/v3" // pinned in go.mod before its first use
