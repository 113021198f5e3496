package broker_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rindle-sh/rindle-go/broker"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/internal/natstest"
	"github.com/rindle-sh/rindle-go/internal/streamtest"
	"github.com/rindle-sh/rindle-go/producer"
	"github.com/rindle-sh/rindle-go/producer/relaytest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats.go keeps a package-level timer pool goroutine; the server's are ours to stop.
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go.(*Conn).doReconnect"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine.func1"),
		// watermill's suite fans several subscribers into one channel it stops reading
		// (internal/subscriber.multiplier); its forwarding goroutines stay blocked there.
		goleak.IgnoreAnyFunction("github.com/ThreeDotsLabs/watermill/internal/subscriber.(*multiplier).Subscribe.func2"),
		goleak.IgnoreAnyFunction("github.com/ThreeDotsLabs/watermill/internal/subscriber.(*multiplier).Subscribe.func3"))
}

func open(t testing.TB, url, name string) *broker.Broker {
	t.Helper()
	b, err := broker.Open(t.Context(), broker.Config{URL: url, Name: name})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func subscribe(t *testing.T, b *broker.Broker) <-chan *message.Message {
	t.Helper()
	ch, err := b.Subscriber.Subscribe(t.Context(), b.Topic)
	require.NoError(t, err)
	return ch
}

func publish(t *testing.T, b *broker.Broker, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		require.NoError(t, b.Publisher.Publish(b.Topic, message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprint(i)))))
	}
}

// receive takes n messages in order, acking each.
func receive(t *testing.T, ch <-chan *message.Message, n int) []string {
	t.Helper()
	var got []string
	for range n {
		select {
		case m := <-ch:
			got = append(got, string(m.Payload))
			m.Ack()
		case <-eventually.Late(t):
			t.Fatalf("only %d of %d messages: %v", len(got), n, got)
		}
	}
	return got
}

func seq(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprint(i))
	}
	return out
}

// TestJetStreamBroadcastsEveryTransactionToEveryInstanceInOrder: each instance's subscriber
// gets every message published after it subscribed (not a work queue), in order, and a
// broker restart in the middle loses none.
func TestJetStreamBroadcastsEveryTransactionToEveryInstanceInOrder(t *testing.T) {
	ns := natstest.Start(t)
	leader := open(t, ns.URL(), "a")
	publish(t, leader, 0, 5) // before anyone subscribed: nobody gets these
	b, c := open(t, ns.URL(), "b"), open(t, ns.URL(), "c")
	chB, chC := subscribe(t, b), subscribe(t, c)
	publish(t, leader, 5, 105)
	require.Equal(t, seq(5, 105), receive(t, chB, 100))
	require.Equal(t, seq(5, 105), receive(t, chC, 100))

	ns.Restart(300 * time.Millisecond)
	// The publisher retries across the outage, as the CDC reader does (it stalls, then resumes).
	for i := 105; i < 205; i++ {
		eventually.True(t, func() bool {
			return leader.Publisher.Publish(leader.Topic, message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprint(i)))) == nil
		})
	}
	require.Equal(t, seq(105, 205), receive(t, chB, 100), "nothing lost or doubled across the restart")
	require.Equal(t, seq(105, 205), receive(t, chC, 100))
}

func TestRelayReplaysAStreamsFramesToAnotherInstanceAndFollowsIt(t *testing.T) {
	ns := natstest.Start(t)
	a, b := open(t, ns.URL(), "a"), open(t, ns.URL(), "b")
	const id = "chat:7/msg 1" // colons, slashes and spaces: not a NATS token as is
	ctx := t.Context()

	src, err := b.Relay.Attach(ctx, id, 0)
	require.NoError(t, err)
	require.Nil(t, src, "a stream nobody published is absent")

	chunk := func(from producer.Seq, text string) producer.Frame {
		return producer.Frame{Type: producer.FrameChunk, From: from, Seq: from + producer.Len16(text), Text: text}
	}
	require.NoError(t, a.Relay.Publish(id, chunk(0, "héllo ")))
	require.NoError(t, a.Relay.Publish(id, producer.Frame{Type: producer.FrameDurable, Seq: 6}))
	eventually.True(t, func() bool {
		src, err = b.Relay.Attach(ctx, id, 3)
		return err == nil && src != nil
	})
	defer src.Close()
	f, err := src.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, producer.Frame{Type: producer.FrameOpen, StreamID: id, From: 3, Seq: 3}, f, "an open at the join offset first")
	f, err = src.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, chunk(0, "héllo "), f, "then the chunk that holds it: the conform pass trims")
	f, err = src.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, producer.FrameDurable, f.Type)
	require.NoError(t, a.Relay.Publish(id, chunk(6, "wörld 😀")))
	require.NoError(t, a.Relay.Publish(id, producer.Frame{Type: producer.FrameEnd, Seq: 14, Status: producer.StatusComplete}))
	f, err = src.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, chunk(6, "wörld 😀"), f, "then live")
	f, err = src.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, producer.FrameEnd, f.Type)
	_, err = src.Next(ctx)
	require.ErrorIs(t, err, io.EOF)

	// The live stream lives in memory: a broker restart loses it, and the relay provisions it
	// again, so streams opened afterwards are relayed as before.
	ns.Restart(200 * time.Millisecond)
	eventually.True(t, func() bool {
		if a.Relay.Publish("after", chunk(0, "x")) != nil {
			return false
		}
		src, err = b.Relay.Attach(ctx, "after", 0)
		return err == nil && src != nil
	}, "the relay came back after the restart")
	defer src.Close()
	f, err = src.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, chunk(0, "x"), f)
}

// TestRelayProvisionsALostStreamOnAttach: the relay looks frames up through the handle it got
// when it provisioned the live stream. When the stream is gone while the connection stays up
// (deleted by an operator, or lost by a broker restart the client never saw), an attach answers
// absent, not an error, and provisions the stream again, so streams published afterwards are
// relayed as before.
func TestRelayProvisionsALostStreamOnAttach(t *testing.T) {
	ns := natstest.Start(t)
	a, b := open(t, ns.URL(), "a"), open(t, ns.URL(), "b")
	ctx := t.Context()
	require.NoError(t, a.Relay.Publish("before", producer.Frame{Type: producer.FrameOpen, StreamID: "before"}))

	nc, err := nats.Connect(ns.URL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	require.NoError(t, js.DeleteStream(ctx, broker.DefaultLiveStream))

	src, err := b.Relay.Attach(ctx, "before", 0)
	require.NoError(t, err, "a lost stream is absent, not an error")
	require.Nil(t, src)
	_, err = js.Stream(ctx, broker.DefaultLiveStream)
	require.NoError(t, err, "the attach provisioned the stream again")

	require.NoError(t, a.Relay.Publish("after", producer.Frame{Type: producer.FrameOpen, StreamID: "after"}))
	eventually.True(t, func() bool {
		src, err = b.Relay.Attach(ctx, "after", 0)
		return err == nil && src != nil
	}, "the publish is captured again")
	defer src.Close()
	f, err := src.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, producer.Frame{Type: producer.FrameOpen, StreamID: "after"}, f)
}

func TestOpenRefusesUnknownURLsAndUnreachableBrokers(t *testing.T) {
	_, err := broker.Open(t.Context(), broker.Config{URL: "kafka://x:9092"})
	require.ErrorContains(t, err, "unsupported URL")
	_, err = broker.Open(t.Context(), broker.Config{URL: "nats://127.0.0.1:1"})
	require.ErrorContains(t, err, "broker: connect nats://127.0.0.1:1")
	b, err := broker.Open(t.Context(), broker.Config{})
	require.NoError(t, err)
	require.Equal(t, "gochannel", b.Kind)
	require.Nil(t, b.Relay, "one process needs no relay")
	require.NoError(t, b.Close())
}

// BenchmarkBroadcastToThreeInstances publishes CDC-sized messages (a chunk insert, ~300 bytes)
// through JetStream to three instances' ordered consumers and reports what one broker carries:
// messages published per second, and deliveries per second across the three.
//
//	go test ./broker -run '^$' -bench Broadcast -benchtime 20000x
func BenchmarkBroadcastToThreeInstances(b *testing.B) {
	ns := natstest.Start(b)
	open := func(name string) *broker.Broker {
		br, err := broker.Open(b.Context(), broker.Config{URL: ns.URL(), Name: name})
		require.NoError(b, err)
		b.Cleanup(func() { _ = br.Close() })
		return br
	}
	leader := open("leader")
	var chans []<-chan *message.Message
	for _, name := range []string{"a", "b", "c"} {
		br := open(name)
		ch, err := br.Subscriber.Subscribe(b.Context(), br.Topic)
		require.NoError(b, err)
		chans = append(chans, ch)
	}
	payload := make([]byte, 300)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	done := make(chan int, 3)
	b.ResetTimer()
	for _, ch := range chans {
		go func() {
			n := 0
			for n < b.N {
				m := <-ch
				m.Ack()
				n++
			}
			done <- n
		}()
	}
	start := time.Now()
	for range b.N {
		require.NoError(b, leader.Publisher.Publish(leader.Topic, message.NewMessage(watermill.NewUUID(), payload)))
	}
	published := time.Since(start)
	for range chans {
		<-done
	}
	all := time.Since(start)
	b.ReportMetric(float64(b.N)/published.Seconds(), "published/s")
	b.ReportMetric(float64(3*b.N)/all.Seconds(), "deliveries/s")
}

// TestANackedTransactionIsDeliveredAgainBeforeTheNext: ordered consumers keep no
// acknowledgements on the server, so the subscriber itself redelivers a nack, in order.
func TestANackedTransactionIsDeliveredAgainBeforeTheNext(t *testing.T) {
	ns := natstest.Start(t)
	b := open(t, ns.URL(), "b")
	ch := subscribe(t, b)
	publish(t, b, 0, 10)
	var got []string
	nacked := 0
	for len(got) < 10 {
		select {
		case m := <-ch:
			if string(m.Payload) == "5" && nacked < 2 {
				nacked++
				m.Nack() // the view's handler failed (a database outage): not lost
				continue
			}
			got = append(got, string(m.Payload))
			m.Ack()
		case <-eventually.Late(t):
			t.Fatalf("only %v", got)
		}
	}
	require.Equal(t, seq(0, 10), got)
	require.Equal(t, 2, nacked)
}

func TestOpenRefusesANegativeRetentionByField(t *testing.T) {
	t.Parallel()
	var ce *broker.ConfigError
	_, err := broker.Open(t.Context(), broker.Config{Retention: -time.Second})
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "Retention", ce.Field)
}

// The NATS relay passes the relay seam's conformance suite, on one real server.
func TestRelayPassesTheRelaySuite(t *testing.T) {
	srv := natstest.Start(t)
	relaytest.Run(t, func(t *testing.T) *producer.Relay { return open(t, srv.URL(), "relay-suite").Relay })
}

// TestRelayJoinNearTheEndPullsWhatTheJoinerNeeds: a reader joining a long answer near its end
// pulls a few lookups and the frames from its join point from NATS, not the whole answer (it
// pulled every frame, 100,013 messages for a 10-unit join, before the relay sought; then 15
// messages for 5 frames needed, before the seek kept what it had fetched and the open was made,
// not fetched). The count is what the server sent the joining instance's relay connection,
// replies included, and it may be at most twice the frames the joiner needs.
func TestRelayJoinNearTheEndPullsWhatTheJoinerNeeds(t *testing.T) {
	ns := natstest.Start(t)
	a, b := open(t, ns.URL(), "a"), open(t, ns.URL(), "b")
	const id, chunks, size = "long", 20000, 5
	frames := []producer.Frame{{Type: producer.FrameOpen, StreamID: id}}
	var at producer.Seq
	var answer strings.Builder // the whole text
	for i := range chunks {
		frames = append(frames, producer.Frame{Type: producer.FrameChunk, From: at, Seq: at + size, Text: fmt.Sprintf("%05d", i%100000)})
		answer.WriteString(frames[len(frames)-1].Text)
		at += size
		if i%100 == 99 {
			frames = append(frames, producer.Frame{Type: producer.FrameDurable, Seq: at})
		}
	}
	frames = append(frames, producer.Frame{Type: producer.FrameEnd, Seq: at, Status: producer.StatusComplete})
	for _, f := range frames {
		require.NoError(t, a.Relay.Publish(id, f))
		require.NoError(t, a.Relay.Publish("other", f)) // interleaved in the stream's sequence
	}
	ctx := t.Context()
	// Wait until the broker holds the end: the publish is a buffered core publish. Under load
	// that took over 30 s (two busy loops, a fuzzer and the race detector on two cores).
	eventually.True(t, func() bool {
		src, err := b.Relay.Attach(ctx, id, at)
		if err != nil || src == nil {
			return false
		}
		defer src.Close()
		var last producer.Frame
		for !last.Terminal() {
			if last, err = src.Next(ctx); err != nil {
				return false
			}
		}
		return true
	}, "the broker holds the answer's end")

	for _, back := range []producer.Seq{10, 1000, 0} {
		from := at - back
		before := ns.OutMsgs("b relay")
		src, err := b.Relay.Attach(ctx, id, from)
		require.NoError(t, err)
		// The first frame is in hand at once: a join waits for it, and it must not wait on the
		// broker (which may go away right after the attach). A context already ended shows it.
		ended, end := context.WithCancel(ctx)
		end()
		first, err := src.Next(ended)
		require.NoError(t, err, "the first frame needs no message from the broker")
		got := []producer.Frame{first}
		for !got[len(got)-1].Terminal() {
			f, err := src.Next(ctx)
			require.NoError(t, err)
			got = append(got, f)
		}
		require.NoError(t, src.Close())
		pulled := ns.OutMsgs("b relay") - before

		// What the joiner needs: the open, the chunks past from (the first may begin before it),
		// the durable frames past from, and the end.
		need := 0
		for _, f := range frames {
			if f.Type == producer.FrameOpen || f.Terminal() || f.Type == producer.FrameChunk && f.Seq > from ||
				f.Type == producer.FrameDurable && f.Seq > from {
				need++
			}
		}
		t.Logf("join %d units from the end of %d frames: %d frames yielded, %d needed, %d messages pulled from NATS",
			back, len(frames), len(got), need, pulled)
		// The source yields those (the open made at from), and when joined at the very end also
		// the last chunk and the durable frame at from, which the reader holds (the conform pass
		// trims the chunk).
		extra := 0
		if back == 0 {
			extra = 2 // and the durable frame at from
		}
		require.Len(t, got, need+extra)
		require.Equal(t, producer.Frame{Type: producer.FrameOpen, StreamID: id, From: from, Seq: from}, got[0],
			"the open at the join offset comes first, before any message from the consumer")

		// What the reader gets: the frames through the plane's conform pass, which opens the
		// reader at from (on the open, when the source yields it first, or on the first frame)
		// and trims what it holds.
		conform := producer.NewConform(id, from, func(reason string) { t.Errorf("conform: %s", reason) })
		var read []producer.Frame
		for _, f := range got {
			read = append(read, conform.Feed(f)...)
		}
		require.NotEmpty(t, read)
		require.Equal(t, producer.FrameOpen, read[0].Type, "the reader is opened first")
		require.Equal(t, from, read[0].From, "at its join offset")
		// The reader held the answer up to from; the frames hold to the wire contract (chunks
		// that follow one another from there, durable frames within them, a terminal last) and
		// complete it.
		text, last := streamtest.Replay(t, producer.Slice16(answer.String(), 0, from), read)
		require.True(t, text == answer.String(), "the reader ends with the whole answer, not %d units of its %d", producer.Len16(text), at)
		require.Equal(t, producer.FrameEnd, last.Type)

		c := got[1]
		require.Equal(t, producer.FrameChunk, c.Type, "then the consumer's first message is a chunk")
		require.LessOrEqual(t, c.From, from)
		if back == 0 {
			require.Equal(t, from, c.Seq, "joined at the very end: the last chunk, which the reader holds")
			continue
		}
		require.Greater(t, c.Seq, from, "the chunk that holds the join point")
		// The bar: no more than twice the frames the joiner needs, lookups included.
		require.LessOrEqual(t, pulled, int64(2*need), "messages pulled, lookups included, for %d frames needed", need)
	}
}
