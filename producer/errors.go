package producer

import (
	"errors"
	"fmt"
)

// Sentinels a caller branches on. Each typed error below matches one of them with errors.Is.
var (
	// ErrOpenRefused: the stream cannot be opened (see OpenRefusedError).
	ErrOpenRefused = errors.New("stream open refused")
	// ErrForbidden: the authorizer denied a subscribe. It is returned the same way whether or not
	// the stream exists.
	ErrForbidden = errors.New("forbidden")
	// ErrClosed: the stream is sealed or sealing, or the plane is closed.
	ErrClosed = errors.New("stream closed")
	// ErrInvalidText: a pushed delta is not text a durable store can hold: invalid UTF-8, or
	// U+0000, which PostgreSQL's text type refuses (a model can be steered into emitting it).
	// Nothing of it was taken, and no reader saw it.
	ErrInvalidText = errors.New("text a durable store cannot hold")
	// ErrPermanent: the store refused a checkpoint or a seal in a way no retry can change
	// (PostgreSQL's data exceptions, class 22, and program limits, class 54). A Committer
	// marks such an error with PermanentError. The plane does not retry it: the stream seals
	// error at once with exactly what is durable, and every reader's end says so.
	ErrPermanent = errors.New("the store refused the write for good")
	// ErrNotDurable: a flush or seal could not make the produced text durable.
	ErrNotDurable = errors.New("produced text is not durable")
	// ErrFenced: the store no longer accepts this producer's writes, because someone else
	// sealed the stream (the sweeper, after this host's lease lapsed). A verdict: the plane
	// does not retry it, the stream ends at once with what the row holds (see FencedError), and
	// its text stays as the other writer sealed it.
	ErrFenced = errors.New("stream sealed by another writer")
	// ErrSuspended: this host cannot prove that it still holds its streams (its lease could not
	// be renewed in time), so it refuses new pushes and opens rather than claim them. Temporary:
	// once the lease is held again and the store confirms the stream is still this host's,
	// pushes are taken again; if another host sealed it meanwhile, the stream ends fenced.
	ErrSuspended = errors.New("this host cannot confirm it still holds the stream")
	// ErrCancelled: a reader asked the producer to stop, and the plane has seen it. No more text
	// is taken; seal the stream with Close (status cancelled).
	ErrCancelled = errors.New("stream cancelled by a reader")
	// ErrOffsetConflict: a push's expected offset does not fit the stream (see
	// OffsetConflictError).
	ErrOffsetConflict = errors.New("expected offset does not match the stream")
)

// OffsetConflictError is a PushAt whose text cannot be placed at its offset: the offset is past
// the stream's length, below what the plane retains, inside a character, or the text there is
// different. Seq is the stream's length, where the producer should resume.
type OffsetConflictError struct {
	StreamID string
	At       Seq
	Seq      Seq
	Reason   string
}

func (e *OffsetConflictError) Error() string {
	return fmt.Sprintf("stream %s: push at %d: %s (the stream is at %d)", e.StreamID, e.At, e.Reason, e.Seq)
}

// Is makes errors.Is(err, ErrOffsetConflict) true.
func (e *OffsetConflictError) Is(target error) bool { return target == ErrOffsetConflict }

// FencedError is ErrFenced with what the store holds: the status and length another writer
// sealed the row with. A stream that meets it ends at once, and its readers' end frame carries
// exactly these.
type FencedError struct {
	StreamID string
	Status   Status
	Seq      Seq
	Message  string // the row's error message, when it has one
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("stream %s: sealed by another writer: the row is %s at %d", e.StreamID, e.Status, e.Seq)
}

// Is makes errors.Is(err, ErrFenced) true.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// OpenRefusedError is a settled verdict about the app's data: the message row is missing, its
// length column is NULL or already advanced, another producer holds it, or the stream is already
// open on this plane. It is never retried: retrying would re-ask a question already answered.
type OpenRefusedError struct {
	StreamID string
	Reason   string
}

func (e *OpenRefusedError) Error() string {
	return fmt.Sprintf("stream %s: open refused: %s", e.StreamID, e.Reason)
}

// Is makes errors.Is(err, ErrOpenRefused) true.
func (e *OpenRefusedError) Is(target error) bool { return target == ErrOpenRefused }

// ForbiddenError is a denied subscribe. It carries the id the caller asked for, nothing the
// caller did not already know.
type ForbiddenError struct {
	StreamID string
}

func (e *ForbiddenError) Error() string { return fmt.Sprintf("stream %s: forbidden", e.StreamID) }

// Is makes errors.Is(err, ErrForbidden) true.
func (e *ForbiddenError) Is(target error) bool { return target == ErrForbidden }

// NotDurableError says how much of the produced text the store holds when a flush or seal
// could not make all of it durable. Err, when set, is the store's failure.
type NotDurableError struct {
	StreamID   string
	DurableSeq Seq
	Seq        Seq
	Err        error
}

func (e *NotDurableError) Error() string {
	msg := fmt.Sprintf("stream %s: only %d of %d characters are durable", e.StreamID, e.DurableSeq, e.Seq)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is makes errors.Is(err, ErrNotDurable) true.
func (e *NotDurableError) Is(target error) bool { return target == ErrNotDurable }

func (e *NotDurableError) Unwrap() error { return e.Err }

// ConfigError names the Config field that New refused, and why.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("producer: Config.%s: %s", e.Field, e.Reason)
}

// PermanentError marks a store's refusal that retrying cannot fix: errors.Is(err, ErrPermanent)
// holds for it, and Err is the store's own error.
type PermanentError struct {
	Err error
}

func (e *PermanentError) Error() string { return e.Err.Error() }

// Unwrap returns the store's error.
func (e *PermanentError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrPermanent) true.
func (e *PermanentError) Is(target error) bool { return target == ErrPermanent }
