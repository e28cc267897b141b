// Package cluster replicates the table service across nodes with etcd's
// raft (docs/cluster.md). A node's loop drives a replica of each raft group
// it belongs to: the system group, whose log carries the table service's
// writes as commands, and range groups, which carry one range partition's
// entity writes. Every replica applies its group's commands to the node's
// partition.Store, a group's leader answers reads within a read lease or
// after a ReadIndex round, and idle range groups quiesce.
package cluster
