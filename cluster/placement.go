package cluster

import (
	"context"
	"fmt"
	"slices"

	"github.com/tabuladb/tabula/cluster/command"
	"github.com/tabuladb/tabula/partition"
)

// Placement decides where a table's range group lives: the nodes its
// descriptor names as voters. Changing them is a command of the system
// group (kind 8, set-range-voters), so every replica's catalog agrees on
// it; the group's leader then moves the members (range_members.go).

// ErrBadPlacement is wrapped by the refusal of a placement that cannot
// be done anywhere: a table without a range group, voters that are not
// nodes of the cluster.
var ErrBadPlacement = fmt.Errorf("cluster: no such placement")

// SetTableVoters names the nodes a table's range group is to have as
// voters. It is asked of the system group's ready leader, and returns
// once every replica of the system group will record it (the command is
// applied here); the group's members move after that.
func (n *Node) SetTableVoters(ctx context.Context, account, table string, voters []uint64) error {
	g, err := n.st().TableGroup(account, table)
	switch {
	case err != nil:
		return err
	case g.ID == 0:
		return fmt.Errorf("%w: table %s has no range group (the system group replicates it)", ErrBadPlacement, table)
	}
	if err := partition.ValidVoters(voters); err != nil {
		return fmt.Errorf("%w: %v", ErrBadPlacement, err)
	}
	members := n.peers()
	for _, v := range voters {
		if !slices.Contains(members, v) {
			return fmt.Errorf("%w: node %d is not a member of the cluster", ErrBadPlacement, v)
		}
	}
	_, err = n.Store().write(ctx, &command.Command{Kind: command.KindSetRangeVoters, Account: account, Table: table, Group: g.ID, Voters: voters}, 0)
	return err
}
