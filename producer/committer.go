package producer

import (
	"context"
	"errors"
	"time"
)

// Committer is the durable plane as the live plane sees it. checkpoint.Store implements it on
// Postgres; CommitFunc adapts an app's own callback. The plane retries Open, Append and Close on
// error (except a refused open), so each must be idempotent under a repeated input, and Append
// also under a re-cover: an append whose write committed while its reply was lost leaves the
// plane believing less than the store holds, so the next append's [From, Seq) may overlap text
// the store already has.
type Committer interface {
	// CheckOpenable checks, once per open and never retried, that the stream may be opened. It
	// returns an *OpenRefusedError for a settled refusal about the app's data.
	CheckOpenable(ctx context.Context, streamID string) error

	// Open marks the stream live. It returns an *OpenRefusedError when a rival producer won the
	// row; the plane does not retry that. An error whose reply may have been lost should be
	// settled by reading the row back, as Append does: when the outcome stays unknown, the
	// plane releases the stream with an interrupted Close at 0 (which must then be a no-op on a
	// row this producer never opened).
	Open(ctx context.Context, in OpenInput) error

	// Append makes [From, Seq) durable, given that [0, From) already is. It reports what the
	// store actually holds afterwards when it can read it back: a confirmation short of Seq makes
	// the plane re-cover from the confirmed offset instead of claiming more than the store has.
	Append(ctx context.Context, in AppendInput) (AppendResult, error)

	// Close seals the stream with its whole produced text (Body from BodyFrom). After it returns
	// nil, the store holds exactly Seq units and the status. A *FencedError says another writer
	// sealed the row first; any other error is retried by the plane until the seal commits.
	Close(ctx context.Context, in CloseInput) error

	// DurableSeq reads the store's authoritative durable length, used to resynchronize after a
	// failed append. It returns ErrNoAuthority when the store cannot tell.
	DurableSeq(ctx context.Context, streamID string) (Seq, error)
}

// WholeBodyCommitter is implemented by a Committer whose Close needs the whole produced text
// (compaction writes it as the body). The plane then retains the whole buffer and refuses a
// RetainChars setting.
type WholeBodyCommitter interface {
	Committer
	NeedsWholeBody()
}

// Reclaimer is implemented by a Committer that can tell whether this host still holds a stream
// (checkpoint.Store: the row is streaming under this host's token). Plane.Resume asks it for
// every suspended stream after the host's lease is held again; without it, Resume takes the
// streams back on trust.
type Reclaimer interface {
	// Reclaim returns nil when the stream is still this host's, a *FencedError when another
	// writer sealed it, and any other error when it cannot tell (the stream stays suspended).
	// It must wait for a concurrent writer that holds the row (a sweep in flight) rather than
	// read around it.
	Reclaim(ctx context.Context, streamID string) error
}

// OpenInput is what Committer.Open receives.
type OpenInput struct {
	StreamID  string
	Meta      any       // the app payload given to Plane.Open
	StartedAt time.Time // when the plane began opening
}

// AppendInput is one checkpoint slice: len16(Text) == Seq-From.
type AppendInput struct {
	StreamID string
	From     Seq
	Seq      Seq
	Text     string
}

// AppendResult is what an append confirmed.
type AppendResult struct {
	// Durable is the store's authoritative length after the append, valid when ReadBack is true.
	// Without a read-back the plane takes the append as confirmed through AppendInput.Seq.
	Durable  Seq
	ReadBack bool
	// CancelRequested reports that a reader asked the producer to stop.
	CancelRequested bool
}

// CloseInput is the seal. Body is the retained text starting at offset BodyFrom; BodyFrom is 0,
// and Body the whole response, unless the plane trims (RetainChars, commit mode only). From is
// the durable length the plane last confirmed, so a committer that does not compact can append
// just the outstanding tail, Body[From-BodyFrom:] in UTF-16 units. Seq == BodyFrom+len16(Body).
type CloseInput struct {
	StreamID string
	From     Seq
	Seq      Seq
	Body     string
	BodyFrom Seq
	Status   Status
	Error    string
}

// ErrNoAuthority is returned by Committer.DurableSeq when the store cannot say what it holds.
var ErrNoAuthority = errors.New("producer: the committer has no readable durable length")

// CommitKind names the step a CommitFunc is asked to persist.
type CommitKind string

// The commit steps.
const (
	CommitOpen   CommitKind = "open"
	CommitAppend CommitKind = "append"
	CommitClose  CommitKind = "close"
)

// CommitInput is what a CommitFunc receives: Kind says which of the three inputs is set.
type CommitInput struct {
	Kind   CommitKind
	Open   OpenInput
	Append AppendInput
	Close  CloseInput
}

// CommitFunc is the escape hatch: persist checkpoints however the app likes. It is retried on
// error, so it must be idempotent under a repeated input and under a re-cover (see Committer):
// apply only the unseen suffix of an overlapping append, or better, return the applied length in
// AppendResult (ReadBack true) and the plane resynchronizes. Return CancelRequested to stop the
// producer. The result is ignored for open and close.
type CommitFunc func(ctx context.Context, in CommitInput) (AppendResult, error)

var _ Committer = CommitFunc(nil)

// CheckOpenable accepts every stream: the app checked its own data.
func (f CommitFunc) CheckOpenable(context.Context, string) error { return nil }

// Open calls f with an open input.
func (f CommitFunc) Open(ctx context.Context, in OpenInput) error {
	_, err := f(ctx, CommitInput{Kind: CommitOpen, Open: in})
	return err
}

// Append calls f with an append input.
func (f CommitFunc) Append(ctx context.Context, in AppendInput) (AppendResult, error) {
	return f(ctx, CommitInput{Kind: CommitAppend, Append: in})
}

// Close calls f with a close input.
func (f CommitFunc) Close(ctx context.Context, in CloseInput) error {
	_, err := f(ctx, CommitInput{Kind: CommitClose, Close: in})
	return err
}

// DurableSeq returns ErrNoAuthority: a callback has no readable authority.
func (f CommitFunc) DurableSeq(context.Context, string) (Seq, error) { return 0, ErrNoAuthority }
