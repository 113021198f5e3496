package broker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rindle-sh/rindle-go/producer"
)

// The relay carries the frames an instance's producers fan out to readers on other instances,
// on the same NATS server as the CDC stream: a memory-backed JetStream stream with one subject
// per live stream, kept DefaultLiveRetention. Publishing is a core NATS publish, which the
// stream captures: it never blocks. Attaching yields an open at the join offset, then that
// subject's frames from the chunk that holds it (found by a search over the stream's sequence
// numbers, galloping back from the last frame: a joiner near the end of a long answer costs a
// few lookups, not a replay of the answer) through an ordered consumer, and follows it live.
// The plane's conform pass trims what the reader already holds and turns a gap (frames aged
// out, a broker restart) into stale, after which the reader reads the durable plane. So a
// broker outage costs smoothness, never correctness.
//
// The relay speaks to NATS through nats.go, the engine's own client, rather than through
// watermill-nats as the CDC path does, for two reasons found in watermill-nats v2.1.3: its
// JetStream publisher waits for an acknowledgement per message, and the seam is called under
// the stream's lock; and its JetStream subscriber closes the output channel before it drains
// the consumer, so a subscription cancelled while a message is in hand can panic with a send on
// a closed channel. The CDC subscription lives as long as the process; a relay subscription
// lives as long as one reader's connection, and readers come and go all the time.

func liveSubject(streamID string) string {
	return DefaultLiveStream + "." + base64.RawURLEncoding.EncodeToString([]byte(streamID))
}

func liveStreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name: DefaultLiveStream, Subjects: []string{DefaultLiveStream + ".*"}, Storage: jetstream.MemoryStorage,
		MaxAge: DefaultLiveRetention, MaxMsgsPerSubject: DefaultLivePerSubject, Discard: jetstream.DiscardOld,
	}
}

func newRelay(ctx context.Context, cfg Config) (*producer.Relay, func() error, error) {
	nc, err := connect(cfg, "relay")
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	r := &relay{nc: nc, js: js}
	if err := r.provision(ctx); err != nil {
		nc.Close()
		return nil, nil, err
	}
	// A memory stream does not survive a broker restart: provision it again on every reconnect
	// (and on a lookup that finds it missing), or the relay would stay down for good.
	reprovisionOnReconnect(nc, cfg, "relay", r.provision)
	return &producer.Relay{Publish: r.publish, Attach: r.attach}, func() error { nc.Close(); return nil }, nil
}

type relay struct {
	nc *nats.Conn
	js jetstream.JetStream
	// stream is the live stream's handle from the last provision: an attach looks frames up
	// through it without asking the server for the stream's info first.
	stream atomic.Pointer[jetstream.Stream]
}

func (r *relay) provision(ctx context.Context) error {
	stream, err := r.js.CreateOrUpdateStream(ctx, liveStreamConfig())
	if err != nil {
		return fmt.Errorf("broker: provision the live stream: %w", err)
	}
	r.stream.Store(&stream)
	return nil
}

func (r *relay) publish(streamID string, f producer.Frame) error {
	return r.nc.Publish(liveSubject(streamID), f.AppendJSON(nil))
}

// attach follows streamID's frames if some instance has published any; nil (absent) otherwise.
func (r *relay) attach(ctx context.Context, streamID string, from producer.Seq) (producer.FrameSource, error) {
	subject := liveSubject(streamID)
	stream := *r.stream.Load()
	last, err := stream.GetLastMsgForSubject(ctx, subject)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, nil
	case errors.Is(err, jetstream.ErrStreamNotFound):
		// The broker lost the memory stream (a restart, or someone deleted it): nothing to
		// relay; provide for next time.
		return nil, r.provision(ctx)
	case err != nil:
		return nil, fmt.Errorf("broker: relay lookup: %w", err)
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}, DeliverPolicy: jetstream.DeliverAllPolicy}
	var head []producer.Frame
	if from > 0 {
		start, err := seek(ctx, stream, subject, from, last)
		if err != nil {
			return nil, fmt.Errorf("broker: relay seek: %w", err)
		}
		if start > 0 {
			// The reader is opened at from at once, before the consumer's first message: a join
			// waits for its first frame, and a broker that went away now would hold it there.
			// This is the open the subject's first frame conforms to for a reader holding
			// [0, from) (its own offsets are the stream's start, and it may have aged out), made
			// here rather than fetched. (From 0, the consumer's first message is the subject's
			// own open.)
			head = []producer.Frame{{Type: producer.FrameOpen, StreamID: streamID, From: from, Seq: from}}
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, start
		}
	}
	c, err := r.js.OrderedConsumer(ctx, DefaultLiveStream, cfg)
	if err != nil {
		return nil, fmt.Errorf("broker: relay consumer: %w", err)
	}
	it, err := c.Messages()
	if err != nil {
		return nil, fmt.Errorf("broker: relay messages: %w", err)
	}
	return &source{it: it, head: head}, nil
}

// seek finds where a reader joining at from starts: the stream sequence of the chunk that holds
// from, or failing that of the last chunk that begins at or before it (its earlier chunks the
// reader holds). A start of 0 means from the first frame: no chunk begins at or before from
// (frames aged out, or the answer is that short), and the conform pass sorts it out as it does
// a whole replay. last is the subject's last message, already fetched.
//
// The chunks' offsets grow with the stream sequence, so the search gallops back from the last
// frame and then bisects: O(log d) lookups for a joiner d frames from the end. Every lookup is a
// message from the server, so none is made twice (each answer is kept by the sequence asked
// for), the last message is not asked for again, and the search stops at a chunk that holds
// from: a joiner near the end of an answer costs a few messages beside the frames it needs.
func seek(ctx context.Context, stream jetstream.Stream, subject string, from producer.Seq, last *jetstream.RawStreamMsg) (uint64, error) {
	type found struct {
		seq uint64 // 0: no message on subject at or after the sequence asked for (up to last)
		f   producer.Frame
	}
	decode := func(m *jetstream.RawStreamMsg) (found, error) {
		var f producer.Frame
		if err := json.Unmarshal(m.Data, &f); err != nil {
			return found{}, fmt.Errorf("frame %d: %w", m.Sequence, err)
		}
		return found{m.Sequence, f}, nil
	}
	lastFound, err := decode(last)
	if err != nil {
		return 0, err
	}
	asked := map[uint64]found{last.Sequence: lastFound}
	// next is the first message on subject at or after sequence seq (up to last).
	next := func(seq uint64) (found, error) {
		if got, ok := asked[seq]; ok {
			return got, nil
		}
		m, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		var got found
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return found{}, err
		case m.Sequence <= last.Sequence:
			if got, err = decode(m); err != nil {
				return found{}, err
			}
		}
		asked[seq] = got
		if got.seq != 0 {
			asked[got.seq] = got // the first message at or after its own sequence is itself
		}
		return got, nil
	}
	// chunkAt is the first chunk on subject at or after sequence seq (up to last); seq 0 when
	// none.
	chunkAt := func(seq uint64) (found, error) {
		for seq <= last.Sequence {
			got, err := next(seq)
			if err != nil || got.seq == 0 || got.f.Type == producer.FrameChunk {
				return got, err
			}
			seq = got.seq + 1
		}
		return found{}, nil
	}
	begun := func(c found) bool { return c.seq != 0 && c.f.From <= from } // a chunk begun by from
	// Gallop: lo is a sequence whose next chunk begins at or before from, hi one whose does not.
	var lo uint64
	var loChunk found
	hi := last.Sequence + 1
	for step := uint64(1); ; step *= 2 {
		probe := uint64(1)
		if last.Sequence > step {
			probe = last.Sequence - step + 1
		}
		c, err := chunkAt(probe)
		if err != nil {
			return 0, err
		}
		if begun(c) {
			lo, loChunk = probe, c
			break
		}
		hi = probe
		if probe == 1 {
			return 0, nil // no chunk begins at or before from
		}
	}
	// Bisect (lo, hi) for the last chunk that begins at or before from, unless the one found
	// already holds from (no later chunk can begin at or before it).
	for hi-lo > 1 && loChunk.f.Seq <= from {
		mid := lo + (hi-lo)/2
		c, err := chunkAt(mid)
		if err != nil {
			return 0, err
		}
		if begun(c) {
			lo, loChunk = mid, c
		} else {
			hi = mid
		}
	}
	return loChunk.seq, nil
}

type source struct {
	it   jetstream.MessagesContext
	head []producer.Frame // yielded before the consumer's messages
	done bool
}

func (s *source) Next(ctx context.Context) (producer.Frame, error) {
	if s.done {
		return producer.Frame{}, io.EOF
	}
	if len(s.head) > 0 {
		f := s.head[0]
		s.head = s.head[1:]
		return f, nil
	}
	m, err := s.it.Next(jetstream.NextContext(ctx))
	if err != nil {
		if ctx.Err() != nil {
			return producer.Frame{}, context.Cause(ctx)
		}
		return producer.Frame{}, fmt.Errorf("broker: relay: %w", err)
	}
	var f producer.Frame
	if err := json.Unmarshal(m.Data(), &f); err != nil {
		return producer.Frame{}, fmt.Errorf("broker: relay frame: %w", err)
	}
	if f.Terminal() {
		s.done = true
	}
	return f, nil
}

func (s *source) Close() error {
	s.it.Stop()
	return nil
}
