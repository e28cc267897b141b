package cluster

import (
	"context"
	"fmt"

	"github.com/tabuladb/tabula/cluster/command"
	"github.com/tabuladb/tabula/partition"
)

// Store is the table service as a cluster node serves it (it implements
// server.Store): writes are commands proposed to the group and answered
// with the result of applying them here; reads are answered from this
// node's replica after a read round. Both need this node to be the ready
// leader; elsewhere they are refused with 503 ServerBusy (the HTTP layer
// forwards requests to the leader before they get here).
type Store struct{ n *Node }

// Store returns the node's face to the REST server.
func (n *Node) Store() *Store { return &Store{n: n} }

func (s *Store) write(ctx context.Context, c *command.Command, stamps int) (result, error) {
	return s.writeIn(ctx, s.n.replica, c, stamps)
}

func (s *Store) writeIn(ctx context.Context, r *replica, c *command.Command, stamps int) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, s.n.cfg.RequestTimeout)
	defer cancel()
	return r.propose(ctx, c, stamps)
}

// writeEntities proposes an entity write to the group that holds its
// PartitionKey.
func (s *Store) writeEntities(ctx context.Context, c *command.Command, stamps int) (result, error) {
	r, err := s.tableReplica(ctx, c.Account, c.Table, c.Ops[0].Entity.PartitionKey)
	if err != nil {
		return result{}, err
	}
	return s.writeIn(ctx, r, c, stamps)
}

// tableReplica returns the replica that answers for a table's entities of
// PartitionKey pk: the range group's that holds it, or the system group's
// for a table without range groups, or one this node does not know yet
// (the system group's read round or apply settles that: see readTable
// and replica.wrongGroup).
func (s *Store) tableReplica(ctx context.Context, account, table, pk string) (*replica, error) {
	g, err := s.n.st().TableGroupFor(account, table, pk)
	if err != nil || g.ID == 0 {
		return s.n.replica, nil
	}
	if r := s.n.groupLoaded(ctx, g.ID); r != nil {
		return r, nil
	}
	return nil, errMoved(fmt.Sprintf("this node hosts no replica of the table's range group %d", g.ID))
}

func (s *Store) read(ctx context.Context) (context.Context, context.CancelFunc, error) {
	return s.readIn(ctx, s.n.replica)
}

// readTable waits until this node may answer a linearizable read of a
// table's entities of PartitionKey pk: a read round of the group that
// holds it, which it returns. A table this node did not know before the
// system group's round may turn out to have range groups once it is
// applied: the round is then the group's.
func (s *Store) readTable(ctx context.Context, account, table, pk string) (context.Context, *replica, context.CancelFunc, error) {
	r, err := s.tableReplica(ctx, account, table, pk)
	if err != nil {
		return nil, nil, nil, err
	}
	rctx, cancel, err := s.readIn(ctx, r)
	if err != nil || r != s.n.replica {
		return rctx, r, cancel, err
	}
	if again, err := s.tableReplica(ctx, account, table, pk); err != nil || again != r {
		cancel()
		if err != nil {
			return nil, nil, nil, err
		}
		rctx, cancel, err := s.readIn(ctx, again)
		return rctx, again, cancel, err
	}
	return rctx, r, cancel, nil
}

func (s *Store) readIn(ctx context.Context, r *replica) (context.Context, context.CancelFunc, error) {
	rctx, cancel := context.WithTimeout(ctx, s.n.cfg.RequestTimeout)
	if err := r.readBarrier(rctx); err != nil {
		if ctx.Err() == nil && rctx.Err() != nil {
			// No quorum confirmed this node's leadership in time: a read
			// is safe to retry, so ask for that. (Asked before cancel,
			// which would make every refusal look like this one.)
			err = errBusy("no quorum confirmed the leader in time")
		}
		cancel()
		return nil, nil, err
	}
	return rctx, cancel, nil
}

// CreateTable implements server.Store.
func (s *Store) CreateTable(ctx context.Context, account, name string) (partition.Table, error) {
	c := &command.Command{Kind: command.KindCreateTable, Account: account, Table: name}
	if s.n.cfg.RangeGroups {
		c.Kind, c.Voters = command.KindCreateRangeTable, s.n.pickVoters()
	}
	r, err := s.write(ctx, c, 0)
	if err == nil && s.n.cfg.RangeGroups {
		s.n.awaitTableGroup(ctx, account, name)
	}
	return r.table, err
}

// DeleteTable implements server.Store.
func (s *Store) DeleteTable(ctx context.Context, account, name string) error {
	_, err := s.write(ctx, &command.Command{Kind: command.KindDeleteTable, Account: account, Table: name}, 0)
	return err
}

// Apply implements server.Store.
func (s *Store) Apply(ctx context.Context, account, table string, op partition.Op) (partition.StoredEntity, error) {
	r, err := s.writeEntities(ctx, &command.Command{Kind: command.KindApply, Account: account, Table: table, Ops: []partition.Op{op}}, 1)
	return r.entity, err
}

// ExecuteBatch implements server.Store.
func (s *Store) ExecuteBatch(ctx context.Context, account, table string, ops []partition.Op) ([]partition.StoredEntity, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	if len(ops) > partition.MaxBatchOps {
		// The store refuses it; it would not fit a command either.
		return s.n.st().ExecuteBatch(ctx, account, table, ops)
	}
	r, err := s.writeEntities(ctx, &command.Command{Kind: command.KindBatch, Account: account, Table: table, Ops: ops}, len(ops))
	return r.entities, err
}

// SetTableACL implements server.Store.
func (s *Store) SetTableACL(ctx context.Context, account, table string, ids []partition.SignedIdentifier) error {
	_, err := s.write(ctx, &command.Command{Kind: command.KindSetACL, Account: account, Table: table, ACL: ids}, 0)
	return err
}

// SetServiceProperties implements server.Store.
func (s *Store) SetServiceProperties(ctx context.Context, account string, props []byte) error {
	_, err := s.write(ctx, &command.Command{Kind: command.KindSetProperties, Account: account, Properties: props}, 0)
	return err
}

// GetTable implements server.Store.
func (s *Store) GetTable(ctx context.Context, account, name string) (partition.Table, error) {
	ctx, cancel, err := s.read(ctx)
	if err != nil {
		return partition.Table{}, err
	}
	defer cancel()
	return s.n.st().GetTable(ctx, account, name)
}

// QueryTables implements server.Store.
func (s *Store) QueryTables(ctx context.Context, account string, q partition.TableQuery) (partition.TablePage, error) {
	ctx, cancel, err := s.read(ctx)
	if err != nil {
		return partition.TablePage{}, err
	}
	defer cancel()
	return s.n.st().QueryTables(ctx, account, q)
}

// GetEntity implements server.Store.
func (s *Store) GetEntity(ctx context.Context, account, table, pk, rk string) (partition.StoredEntity, error) {
	ctx, r, cancel, err := s.readTable(ctx, account, table, pk)
	if err != nil {
		return partition.StoredEntity{}, err
	}
	defer cancel()
	if r != s.n.replica {
		if _, holds, err := s.n.st().GroupHolds(r.group, account, table, pk); err != nil || !holds {
			return partition.StoredEntity{}, errRangeMoved(r.group)
		}
	}
	return s.n.st().GetEntity(ctx, account, table, pk, rk)
}

// QueryEntities implements server.Store. A page is answered by the range
// that holds its first PartitionKey (partition.QueryStart), up to that
// range's end, where it returns a continuation: the client's next page
// is asked of the next range.
func (s *Store) QueryEntities(ctx context.Context, account, table string, q partition.EntityQuery, fn func(*partition.StoredEntity) error) (partition.Continuation, error) {
	start, err := partition.QueryStart(q)
	if err != nil {
		return partition.Continuation{}, err
	}
	ctx, r, cancel, err := s.readTable(ctx, account, table, start)
	if err != nil {
		return partition.Continuation{}, err
	}
	defer cancel()
	if r != s.n.replica && !r.tableless {
		sp, ok, err := s.n.st().GroupSpan(r.group)
		frozen, ferr := s.n.st().GroupFrozen(r.group)
		if err != nil || ferr != nil || !ok || frozen || !sp.Contains(start) {
			return partition.Continuation{}, errRangeMoved(r.group)
		}
		q.Within = &partition.PartitionRange{Low: sp.LowPartitionKey, High: sp.HighPartitionKey}
	}
	return s.n.st().QueryEntities(ctx, account, table, q, fn)
}

// errRangeMoved answers a read routed to a range group that no longer
// holds its key (it split since the router looked): the client retries,
// and is routed to the range that does.
func errRangeMoved(group uint64) error {
	return errMoved(fmt.Sprintf("range group %d no longer holds the key: the table's range was split or merged", group))
}

// GetTableACL implements server.Store.
func (s *Store) GetTableACL(ctx context.Context, account, table string) ([]partition.SignedIdentifier, error) {
	ctx, cancel, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	return s.n.st().GetTableACL(ctx, account, table)
}

// GetServiceProperties implements server.Store.
func (s *Store) GetServiceProperties(ctx context.Context, account string) ([]byte, error) {
	ctx, cancel, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	return s.n.st().GetServiceProperties(ctx, account)
}
