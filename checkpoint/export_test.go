package checkpoint

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// PendingWrites is how many checkpoints wait for a group-commit slot: tests wait on it instead
// of sleeping.
func PendingWrites(s *Store) int {
	s.group.b.mu.Lock()
	defer s.group.b.mu.Unlock()
	return len(s.group.b.pending)
}

// DeleteInTx runs Delete's work for path in tx, for tests that interleave it with another
// transaction.
func DeleteInTx(ctx context.Context, p *Protocol, tx pgx.Tx, path string) error {
	m, err := p.lockMeta(ctx, tx, path)
	if err != nil {
		return err
	}
	_, err = p.removeStream(ctx, tx, m)
	return err
}

// SetAfterHead makes fn run in every Read between its metadata read and its data read, for
// tests that change the stream there.
func SetAfterHead(p *Protocol, fn func()) { p.afterHead = fn }

// PendingAppends is how many appends wait for a group-commit slot.
func PendingAppends(p *Protocol) int {
	p.appends.mu.Lock()
	defer p.appends.mu.Unlock()
	return len(p.appends.pending)
}

// GroupedAppends is how many appends committed in a transaction with others.
func GroupedAppends(p *Protocol) int64 { return p.grouped.Load() }

// HoldAppendSlots takes every free append slot until the returned function gives them back, as
// transactions ending would: appends that come meanwhile wait, and go as one group.
func HoldAppendSlots(p *Protocol) func() {
	b := p.appends
	b.mu.Lock()
	held := b.max - b.active
	b.active = b.max
	b.mu.Unlock()
	return func() {
		for range held {
			b.handOff()
		}
	}
}
