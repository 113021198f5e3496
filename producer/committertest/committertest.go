// Package committertest holds the conformance suite of the durable seam (producer.Committer)
// and MemStore, an in-memory reference store for producer.CommitFunc.
//
// Run checks what the plane relies on from a committer, on the store's own word (Harness.Stored
// reads what it holds): open refuses a missing or sealed row; an append confirms only what the
// store holds (a read-back reports the truth, and an append without one must have landed
// whole); replays and stale slices change nothing; a slice past the stored length (a gap) is
// never stored; the seal stores exactly the produced text and status and is idempotent; a
// write after the seal changes nothing; an interrupted release at 0 of a row never opened
// leaves it openable; DurableSeq is the stored length or ErrNoAuthority. Offsets are UTF-16
// code units throughout, so every text carries accents and astral characters.
//
// checkpoint.Store runs it on PostgreSQL, and producer runs it over CommitFunc(MemStore.Commit).
// An app with its own CommitFunc runs it over that.
//
// It does not own the plane's retry, fencing or re-cover logic (producer), which is tested
// against misbehaving committers there; this suite pins the committer's half.
package committertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/producer"
)

// Harness is one committer under test with the means to prepare and inspect its store.
type Harness struct {
	// Committer is the implementation under test.
	Committer producer.Committer
	// Create writes the row a stream opens on, as the app does before an open.
	Create func(t *testing.T, streamID string)
	// Stored reads what the store holds for a stream: its text (body and chunks) and status
	// ("" when it has none yet).
	Stored func(t *testing.T, streamID string) (text string, status producer.Status)
}

// Run runs the committer conformance suite; newHarness is called once per subtest.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Helper()
	n := 0
	id := func(name string) string {
		n++
		return fmt.Sprintf("%s-%d", name, n)
	}
	const first, second = "héllo 😀", " wörld 👋🏽!"
	whole := first + second
	l1, l2 := producer.Len16(first), producer.Len16(whole)

	t.Run("OpenAppendSeal", func(t *testing.T) {
		h, ctx, s := newHarness(t), t.Context(), id("m")
		h.Create(t, s)
		open(t, h, s)
		appendOK(t, h, s, 0, first)
		appendOK(t, h, s, l1, second)
		text, status := h.Stored(t, s)
		require.Equal(t, whole, text)
		require.Equal(t, producer.StatusStreaming, status)
		require.NoError(t, h.Committer.Close(ctx, seal(s, l2, whole, producer.StatusComplete)))
		text, status = h.Stored(t, s)
		require.Equal(t, whole, text)
		require.Equal(t, producer.StatusComplete, status)
	})

	t.Run("OpeningAMissingRowIsRefused", func(t *testing.T) {
		h, s := newHarness(t), id("missing")
		requireRefused(t, h, s)
	})

	t.Run("OpeningASealedRowIsRefused", func(t *testing.T) {
		h, ctx, s := newHarness(t), t.Context(), id("sealed")
		h.Create(t, s)
		open(t, h, s)
		appendOK(t, h, s, 0, first)
		require.NoError(t, h.Committer.Close(ctx, seal(s, l1, first, producer.StatusComplete)))
		requireRefused(t, h, s)
		text, status := h.Stored(t, s)
		require.Equal(t, first, text, "a regeneration is a new stream, never a resume")
		require.Equal(t, producer.StatusComplete, status)
	})

	t.Run("ReplaysAndStaleSlicesChangeNothing", func(t *testing.T) {
		h, s := newHarness(t), id("replay")
		h.Create(t, s)
		open(t, h, s)
		appendOK(t, h, s, 0, first)
		tryAppend(t, h, s, 0, first) // the same slice again: a retry after a lost reply
		appendOK(t, h, s, l1, second)
		tryAppend(t, h, s, 0, first) // a stale slice, older than what is stored
		tryAppend(t, h, s, l1, second)
		text, _ := h.Stored(t, s)
		require.Equal(t, whole, text, "each slice stored once")
	})

	t.Run("ASliceAcrossAGapIsNeverStored", func(t *testing.T) {
		h, s := newHarness(t), id("gap")
		h.Create(t, s)
		open(t, h, s)
		appendOK(t, h, s, 0, first)
		tryAppend(t, h, s, l1+2, "xy") // [l1, l1+2) was never sent
		text, _ := h.Stored(t, s)
		require.Equal(t, first, text, "the stored text stays a prefix of the produced text")
		appendOK(t, h, s, l1, second)
		text, _ = h.Stored(t, s)
		require.Equal(t, whole, text)
	})

	t.Run("TheSealIsIdempotent", func(t *testing.T) {
		h, ctx, s := newHarness(t), t.Context(), id("seal-twice")
		h.Create(t, s)
		open(t, h, s)
		appendOK(t, h, s, 0, first)
		in := seal(s, l1, whole, producer.StatusError) // the tail [l1, l2) arrives with the seal
		in.Error = "model crashed"
		require.NoError(t, h.Committer.Close(ctx, in))
		require.NoError(t, h.Committer.Close(ctx, in), "a replayed seal (its reply was lost) confirms")
		text, status := h.Stored(t, s)
		require.Equal(t, whole, text)
		require.Equal(t, producer.StatusError, status)
	})

	t.Run("WritesAfterTheSealChangeNothing", func(t *testing.T) {
		h, ctx, s := newHarness(t), t.Context(), id("after-seal")
		h.Create(t, s)
		open(t, h, s)
		appendOK(t, h, s, 0, first)
		require.NoError(t, h.Committer.Close(ctx, seal(s, l1, first, producer.StatusInterrupted)))
		res, err := h.Committer.Append(ctx, producer.AppendInput{StreamID: s, From: l1, Seq: l2, Text: second})
		if err == nil {
			require.True(t, res.ReadBack && res.Durable == l1, "an append to a sealed row is refused or reports the sealed length, not %+v", res)
		}
		require.Error(t, h.Committer.Close(ctx, seal(s, l2, whole, producer.StatusComplete)), "a different seal of a sealed row is refused")
		text, status := h.Stored(t, s)
		require.Equal(t, first, text)
		require.Equal(t, producer.StatusInterrupted, status)
	})

	t.Run("ReleasingARowNeverOpenedLeavesItOpenable", func(t *testing.T) {
		h, ctx, s := newHarness(t), t.Context(), id("release")
		h.Create(t, s)
		// The plane's release of an open whose outcome stayed unknown: an interrupted seal at 0.
		// On a row this committer never opened it must be a no-op (an error is allowed).
		_ = h.Committer.Close(ctx, seal(s, 0, "", producer.StatusInterrupted))
		text, status := h.Stored(t, s)
		require.Empty(t, text)
		require.NotEqual(t, producer.StatusInterrupted, status)
		open(t, h, s)
		appendOK(t, h, s, 0, first)
	})

	t.Run("DurableSeqIsTheStoredLength", func(t *testing.T) {
		h, ctx, s := newHarness(t), t.Context(), id("durable")
		h.Create(t, s)
		open(t, h, s)
		appendOK(t, h, s, 0, first)
		n, err := h.Committer.DurableSeq(ctx, s)
		if errors.Is(err, producer.ErrNoAuthority) {
			return // the committer cannot tell; the plane then trusts its own confirmations
		}
		require.NoError(t, err)
		require.Equal(t, l1, n)
	})
}

func open(t *testing.T, h Harness, s string) {
	t.Helper()
	require.NoError(t, h.Committer.CheckOpenable(t.Context(), s))
	require.NoError(t, h.Committer.Open(t.Context(), producer.OpenInput{StreamID: s}))
}

// requireRefused: CheckOpenable or Open refuses s with an *OpenRefusedError.
func requireRefused(t *testing.T, h Harness, s string) {
	t.Helper()
	err := h.Committer.CheckOpenable(t.Context(), s)
	if err == nil {
		err = h.Committer.Open(t.Context(), producer.OpenInput{StreamID: s})
	}
	require.ErrorIs(t, err, producer.ErrOpenRefused)
}

func seal(s string, from producer.Seq, body string, status producer.Status) producer.CloseInput {
	return producer.CloseInput{StreamID: s, From: from, Seq: producer.Len16(body), Body: body, Status: status}
}

// appendOK appends text at from and requires it confirmed.
func appendOK(t *testing.T, h Harness, s string, from producer.Seq, text string) {
	t.Helper()
	to := from + producer.Len16(text)
	res, err := h.Committer.Append(t.Context(), producer.AppendInput{StreamID: s, From: from, Seq: to, Text: text})
	require.NoError(t, err)
	honest(t, h, s, to, res)
	if res.ReadBack {
		require.Equal(t, to, res.Durable)
	}
}

// tryAppend appends and requires only honesty: an error, or a confirmation the store backs.
func tryAppend(t *testing.T, h Harness, s string, from producer.Seq, text string) {
	t.Helper()
	to := from + producer.Len16(text)
	res, err := h.Committer.Append(t.Context(), producer.AppendInput{StreamID: s, From: from, Seq: to, Text: text})
	if err == nil {
		honest(t, h, s, to, res)
	}
}

// honest: a read-back reports what the store holds; an append without one must have landed.
func honest(t *testing.T, h Harness, s string, to producer.Seq, res producer.AppendResult) {
	t.Helper()
	text, _ := h.Stored(t, s)
	if res.ReadBack {
		require.Equal(t, producer.Len16(text), res.Durable, "a read-back reports what the store holds")
	} else {
		require.GreaterOrEqual(t, producer.Len16(text), to, "an append confirmed without a read-back must have landed")
	}
}

// MemStore is an in-memory reference store for producer.CommitFunc: what an app's commit
// function must do, in the fewest lines. It guards every append by the stored length and
// reports the truth with every answer, seals only a streaming row, and treats a replayed seal
// as confirmed. Safe for concurrent use.
type MemStore struct {
	mu   sync.Mutex
	rows map[string]*memRow
}

type memRow struct {
	text   string
	status producer.Status // "" until opened
}

// NewMemStore returns an empty store.
func NewMemStore() *MemStore { return &MemStore{rows: map[string]*memRow{}} }

// Create writes an unopened row.
func (m *MemStore) Create(_ *testing.T, streamID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rows[streamID] = &memRow{}
}

// Stored reads a row.
func (m *MemStore) Stored(_ *testing.T, streamID string) (string, producer.Status) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.rows[streamID]; ok {
		return r.text, r.status
	}
	return "", ""
}

// Commit is the producer.CommitFunc.
func (m *MemStore) Commit(_ context.Context, in producer.CommitInput) (producer.AppendResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch in.Kind {
	case producer.CommitOpen:
		r, ok := m.rows[in.Open.StreamID]
		switch {
		case !ok:
			return producer.AppendResult{}, &producer.OpenRefusedError{StreamID: in.Open.StreamID, Reason: "no row"}
		case r.status != "" && r.status != producer.StatusStreaming:
			return producer.AppendResult{}, &producer.OpenRefusedError{StreamID: in.Open.StreamID, Reason: "sealed " + string(r.status)}
		}
		r.status = producer.StatusStreaming
	case producer.CommitAppend:
		a := in.Append
		r, ok := m.rows[a.StreamID]
		if !ok || r.status != producer.StatusStreaming {
			return producer.AppendResult{}, m.fence(a.StreamID)
		}
		if producer.Len16(r.text) == a.From {
			r.text += a.Text
		}
		return producer.AppendResult{Durable: producer.Len16(r.text), ReadBack: true}, nil
	case producer.CommitClose:
		c := in.Close
		r, ok := m.rows[c.StreamID]
		switch {
		case ok && r.status == c.Status && producer.Len16(r.text) == c.Seq:
			return producer.AppendResult{}, nil // a replay
		case !ok || r.status != producer.StatusStreaming:
			return producer.AppendResult{}, m.fence(c.StreamID)
		case producer.Len16(r.text) < c.From:
			return producer.AppendResult{}, fmt.Errorf("stream %s: seal from %d, but the store holds %d", c.StreamID, c.From, producer.Len16(r.text))
		}
		r.text = producer.Slice16(r.text, 0, c.From) + producer.Slice16(c.Body, c.From-c.BodyFrom, c.Seq-c.BodyFrom)
		r.status = c.Status
	}
	return producer.AppendResult{}, nil
}

func (m *MemStore) fence(streamID string) error {
	r := m.rows[streamID]
	if r == nil {
		return &producer.FencedError{StreamID: streamID}
	}
	return &producer.FencedError{StreamID: streamID, Status: r.status, Seq: producer.Len16(r.text)}
}
