package checkpoint

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// appendJob is one Append in the group commit: its request, and the outcome runAppends gives it.
type appendJob struct {
	in  AppendStream
	out AppendOutcome
}

func appendKey(j *appendJob) string { return j.in.Path }

// errAlone sends an append of a group back to its caller to run as a transaction of its own,
// outside the group commit's slots: its stream's row was locked by another transaction (a slot
// never waits on a row lock, so appends to one held stream cannot take every slot and stall
// the others), or the group's transaction failed before it wrote anything.
var errAlone = errors.New("checkpoint: append alone")

// LargeAppendBytes is the body size from which an append is a transaction of its own, outside
// the group commit's slots, as it would be with group commit off. Such a transaction takes time in
// proportion to its body (an 8 MiB append takes tens of milliseconds), and with one slot, every
// other stream's appends would wait that long behind it; below this size, a group of many small
// appends costs less than their transactions would alone.
const LargeAppendBytes = 64 << 10

// appendGrouped is one try of Append through the group commit (errExpired when the stream
// has expired).
func (p *Protocol) appendGrouped(ctx context.Context, in AppendStream) (AppendOutcome, error) {
	if p.appends == nil || len(in.Text) >= LargeAppendBytes {
		return p.appendOnce(ctx, in)
	}
	j, err := p.appends.do(ctx, appendJob{in: in})
	if errors.Is(err, errAlone) {
		return p.appendOnce(ctx, in)
	}
	return j.out, err
}

// runAppends runs a group of appends, one per stream, as one transaction of two round trips:
//
//  1. BEGIN; lock the group's streams' rows, skipping those another transaction holds (SKIP
//     LOCKED: a group never waits on a row lock, so it neither stalls behind one stream's long
//     transaction nor deadlocks with another group); then each append's reads, as a lone append
//     reads them (queueAppendReads), each a statement of its own and so read after the lock.
//     The reads of an append whose row was not locked (held, missing or deleted) are dropped,
//     and it runs alone, as appendOnce, whose answers those are. A producer's state is read
//     FOR UPDATE NOWAIT: a producer row held by another transaction fails the group's reads,
//     having written nothing, and every append of the group runs alone instead of waiting.
//  2. Each append's writes, decided by planAppend from its reads, then COMMIT.
//
// Answers are a lone append's: a refusal, a duplicate or a close of a closed stream ends its
// append at once (it writes nothing); the rest are acknowledged only once the COMMIT is. A
// statement the server refuses rolls the group back having written nothing: its append gets
// the error, the others run alone. A failure whose outcome is unknown (the connection lost
// during the COMMIT's round trip) goes to every append still in the group, as it would to a
// lone append.
func (p *Protocol) runAppends(batch []*batchItem[appendJob]) {
	if len(batch) == 1 {
		// The lone transaction, which must not wait on a row lock while it holds a slot: when
		// the row is held, the append waits alone, outside the group commit.
		it := batch[0]
		var err error
		it.v.out, err = p.appendTx(it.ctx, it.v.in, true)
		it.end(err)
		return
	}
	ctx, stop := batchContext(batch)
	defer stop()
	alone := func(items []*batchItem[appendJob]) {
		for _, it := range items {
			it.end(errAlone)
		}
	}
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		alone(batch) // each reports its own failure to reach the database
		return
	}
	defer conn.Release()
	alone(p.appendGroup(ctx, conn, batch))
	_ = rollbackOpen(ctx, conn) // a failed ROLLBACK leaves the connection to be destroyed on release
}

// appendGroup is runAppends' transaction on conn. It ends every append it answers and returns
// the others, which wrote nothing and run alone.
func (p *Protocol) appendGroup(ctx context.Context, conn batchSender, batch []*batchItem[appendJob]) (alone []*batchItem[appendJob]) {
	paths := make([]string, len(batch))
	for i, it := range batch {
		paths[i] = it.v.in.Path
	}
	reads := &pgx.Batch{}
	reads.Queue("BEGIN")
	reads.Queue("SELECT path FROM ds_streams WHERE path = ANY($1) AND deleted_at IS NULL FOR UPDATE SKIP LOCKED", paths)
	for _, it := range batch {
		p.queueAppendReads(reads, it.v.in, true)
	}
	br := conn.SendBatch(ctx, reads)
	if _, err := br.Exec(); err != nil { // BEGIN
		_ = br.Close()
		return batch
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return batch
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		_ = br.Close()
		return batch
	}
	locked := make(map[string]bool, len(got))
	for _, path := range got {
		locked[path] = true
	}
	var kept []*batchItem[appendJob] // the appends whose rows this transaction holds
	var states []appendState
	var errs []error
	for _, it := range batch {
		st, err := p.scanAppendReads(br, it.v.in)
		if err != nil && !isAnswer(err) {
			// The transaction is broken (a producer row another transaction holds, say), or a
			// read came back unreadable: nothing was written, and every append runs alone.
			_ = br.Close()
			return batch
		}
		if !locked[it.v.in.Path] {
			alone = append(alone, it) // its reads are not under its lock: dropped
			continue
		}
		kept = append(kept, it)
		states = append(states, st)
		errs = append(errs, err)
	}
	if err := br.Close(); err != nil {
		return batch
	}
	for _, it := range alone {
		it.end(errAlone) // now, not after the COMMIT: it waits on its row's holder, not on this group
	}
	return p.writeGroup(ctx, conn, kept, states, errs)
}

// writeGroup is the group's second round trip: the writes of the appends whose rows the
// transaction holds, decided from their reads (states, errs), then the COMMIT. It ends every
// append it answers and returns the others, which wrote nothing and run alone.
func (p *Protocol) writeGroup(ctx context.Context, conn batchSender, batch []*batchItem[appendJob], states []appendState, errs []error) (alone []*batchItem[appendJob]) {
	writes := &pgx.Batch{}           // writes' k-th statement is rest[k]'s, then the COMMIT
	var rest []*batchItem[appendJob] // the appends that write
	for i, it := range batch {
		if errs[i] != nil { // expired: Append answers it in a transaction of its own
			it.end(errs[i])
			continue
		}
		out, w, err := p.planAppend(states[i], it.v.in)
		it.v.out = out
		if err != nil || w == nil { // refused, or nothing to write: answered now
			it.end(err)
			continue
		}
		rest = append(rest, it)
		writes.QueuedQueries = append(writes.QueuedQueries, w)
	}
	if len(rest) == 0 {
		return nil
	}
	writes.Queue("COMMIT")
	br := conn.SendBatch(ctx, writes)
	for k := range writes.QueuedQueries {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			switch {
			case !refusal(err):
				endAll(rest, err) // the outcome is unknown
				return nil
			case k == len(rest): // the COMMIT refused: rolled back, nothing applied
				return rest
			}
			// Refused: the group rolled back. The refused append gets the error, the rest go alone.
			refused := rest[k]
			refused.end(fmt.Errorf("checkpoint: append to stream %s: %w", refused.v.in.Path, err))
			return slices.DeleteFunc(rest, func(it *batchItem[appendJob]) bool { return it == refused })
		}
	}
	if err := br.Close(); err != nil {
		endAll(rest, err)
		return nil
	}
	p.grouped.Add(int64(len(rest)))
	for _, it := range rest {
		it.end(nil)
	}
	return nil
}

// batchSender is a connection's SendBatch.
type batchSender interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}

// endAll ends every append with err, whose outcome is unknown (the COMMIT may have happened
// with its reply lost), as a lone append's would be.
func endAll(items []*batchItem[appendJob], err error) {
	for _, it := range items {
		it.end(fmt.Errorf("checkpoint: append to stream %s (in a group of %d): %w", it.v.in.Path, len(items), err))
	}
}

// refusal reports err is the server refusing a statement with an ERROR, which aborts the
// transaction: nothing of it applies. A FATAL (the server ending the session, say for a
// shutdown) may come after a COMMIT took effect, and a broken connection tells nothing.
func refusal(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && cmp.Or(pe.SeverityUnlocalized, pe.Severity) == "ERROR"
}

// isAnswer reports a read's error that answers its append rather than breaking the transaction.
func isAnswer(err error) bool {
	return errors.Is(err, errExpired) || errors.Is(err, ErrStreamNotFound) || errors.Is(err, ErrStreamGone)
}
