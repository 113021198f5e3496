package producer

import "fmt"

// Conform checks the frames of one relayed source against the frame contract, relative to the
// prefix this subscription has actually delivered, and turns every violation into a legal stale
// and nothing else. Stale already means "the store is the whole truth now", so a broken relay
// costs a reader smooth tokens, never corrupted text, and cannot reach the producer.
//
// Replays (a reconnecting adapter re-sending what it already sent) are absorbed. A chunk that
// overlaps the delivered prefix and extends past it is trimmed to its unseen suffix, so a reader
// that only appends stays correct (docs/DESIGN.md §4; the seed passed such a chunk through whole).
//
// Conform is pure state with no I/O. Feed maps one incoming frame to zero, one or two outgoing
// frames (a missing open is synthesized at the join offset); End and Fail close out a source that
// finished or broke without a terminal. After a terminal every method returns nil. It is not safe
// for concurrent use.
type Conform struct {
	streamID    string
	from        Seq // the requested join offset: the synthesized open's position
	pos         Seq // end of the delivered prefix
	lastDurable Seq
	opened      bool
	done        bool
	onViolation func(reason string)
}

// NewConform starts a conform pass for a reader joining streamID at from. onViolation, if not
// nil, hears the reason for every downgrade.
func NewConform(streamID string, from Seq, onViolation func(reason string)) *Conform {
	return &Conform{streamID: streamID, from: from, pos: from, onViolation: onViolation}
}

// Pos is the end of the prefix delivered so far.
func (c *Conform) Pos() Seq { return c.pos }

// Feed conforms one frame from the source.
func (c *Conform) Feed(f Frame) []Frame {
	if c.done {
		return nil
	}
	switch f.Type {
	case FrameOpen:
		if c.opened {
			return nil // a reconnecting adapter's second open
		}
		if f.StreamID != c.streamID || f.From < 0 || f.Seq < f.From || f.DurableSeq < 0 {
			return c.violate(fmt.Sprintf("relay open for %q at %d is malformed", f.StreamID, f.From))
		}
		// An open past the requested offset says the adapter cannot serve it (pub/sub keeps no
		// history): delivering it would leave a hole in the middle of the text.
		if f.From > c.from {
			return c.violate(fmt.Sprintf("relay open at %d cannot serve the requested %d", f.From, c.from))
		}
		c.opened = true
		if f.From < c.from {
			// An adapter that replays from the stream's start (JetStream cannot seek by our seq):
			// the reader holds [0, from), so it is opened there and the replay below is trimmed,
			// not re-sent (a whole-buffer replay on every join overflows the reader's queue).
			f = Frame{Type: FrameOpen, StreamID: f.StreamID, From: c.from, Seq: max(f.Seq, c.from), DurableSeq: min(f.DurableSeq, c.from), Ended: f.Ended}
		}
		c.pos = f.From
		return []Frame{f}
	case FrameChunk:
		if f.From < 0 || Len16(f.Text) != f.Seq-f.From {
			return c.violate(fmt.Sprintf("relay chunk %d→%d does not span exactly its offsets", f.From, f.Seq))
		}
		if f.From > c.pos {
			return c.violate(fmt.Sprintf("relay chunk at %d leaves a gap after %d", f.From, c.pos))
		}
		if f.Seq <= c.pos {
			return nil // wholly inside the delivered prefix: a replay
		}
		if f.From < c.pos {
			skip := c.pos - f.From
			if got := Len16(Slice16(f.Text, 0, skip)); got != skip {
				return c.violate(fmt.Sprintf("relay chunk %d→%d splits a surrogate pair at %d", f.From, f.Seq, c.pos))
			}
			f = Frame{Type: FrameChunk, From: c.pos, Seq: f.Seq, Text: Slice16(f.Text, skip, f.Seq-f.From)}
		}
		out := c.openIfNeeded()
		c.pos = f.Seq
		return append(out, f)
	case FrameDurable:
		// Informational to a reader, so a claim that rewinds, or that outruns what this reader has
		// seen produced (P forbids it), is dropped rather than downgraded; so is one below the
		// join point, which a replay from the start carries by the thousand on a long stream.
		if f.Seq < c.lastDurable || f.Seq > c.pos || f.Seq < c.from {
			return nil
		}
		out := c.openIfNeeded()
		c.lastDurable = f.Seq
		return append(out, f)
	case FrameEnd:
		if f.Seq < 0 {
			return c.violate(fmt.Sprintf("relay end at %d is malformed", f.Seq))
		}
		// A durable length past the delivered prefix means the adapter lost text: the reader is
		// short and must not be told it saw everything.
		if f.Seq > c.pos {
			return c.violate(fmt.Sprintf("relay end at %d outruns the %d characters delivered", f.Seq, c.pos))
		}
		out := c.openIfNeeded()
		c.done = true
		return append(out, f)
	case FrameStale, FrameAbsent:
		// Legal bare: the local plane's own floor and eviction answers carry no open either.
		c.done = true
		return []Frame{f}
	}
	return c.violate(fmt.Sprintf("relay frame of unknown type %q", f.Type))
}

// End closes out a source that finished without a terminal frame: the reader falls back.
func (c *Conform) End() []Frame {
	if c.done {
		return nil
	}
	if c.onViolation != nil {
		c.onViolation("relay source ended without a terminal frame")
	}
	return c.terminate()
}

// Fail closes out a source that broke, or a reader being dropped: a bare stale at the delivered
// position.
func (c *Conform) Fail() []Frame {
	if c.done {
		return nil
	}
	return c.terminate()
}

// openIfNeeded synthesizes the join for an adapter that (correctly, when it broadcasts) never
// mirrors the per-reader open. It sits at the requested offset, which the reader asked from
// because its durable view already holds it.
func (c *Conform) openIfNeeded() []Frame {
	if c.opened {
		return nil
	}
	c.opened = true
	return []Frame{{Type: FrameOpen, StreamID: c.streamID, From: c.from, Seq: c.from, DurableSeq: c.from}}
}

func (c *Conform) terminate() []Frame {
	c.done = true
	return []Frame{{Type: FrameStale, FloorSeq: c.pos, DurableSeq: c.lastDurable}}
}

func (c *Conform) violate(reason string) []Frame {
	if c.onViolation != nil {
		c.onViolation(reason)
	}
	return c.terminate()
}
