package httpapi_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/httpapi"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/internal/streamtest"
	"github.com/rindle-sh/rindle-go/producer"
)

// Issue 10: the HTTP API as a producer and browser surface.

func openHTTP(t *testing.T, c client, w *world, id string) {
	t.Helper()
	prod := token(t, "svc", "producer")
	require.Equal(t, http.StatusCreated, c.do("POST", "/v1/messages", prod, []byte(fmt.Sprintf(`{"id":%q,"owner":"alice"}`, id))).status)
	require.Equal(t, http.StatusOK, c.do("POST", "/v1/streams/"+id+"/open", prod, nil).status)
}

func TestIdempotentAppends(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serve(t, w)
	prod := token(t, "svc", "producer")
	openHTTP(t, c, w, "m")
	body := func(text string, at int) []byte { return fmt.Appendf(nil, `{"text":%q,"expectedSeq":%d}`, text, at) }

	r := c.do("POST", "/v1/streams/m/append", prod, body("hello 😀", 0))
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.EqualValues(t, 8, r.json(t)["applied"])
	// A retry of a request whose answer was lost: absorbed, nothing doubled.
	r = c.do("POST", "/v1/streams/m/append", prod, body("hello 😀", 0))
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.EqualValues(t, 0, r.json(t)["applied"])
	require.EqualValues(t, 8, r.json(t)["seq"])
	// A retry that overlaps and extends: only the new part is pushed.
	r = c.do("POST", "/v1/streams/m/append", prod, body("😀 world", 6))
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.EqualValues(t, 6, r.json(t)["applied"])
	// Different text at a taken offset, a gap, the middle of a surrogate pair: 409 with the seq.
	for _, bad := range [][]byte{body("HELLO", 0), body("later", 99), body("x", 7)} {
		r = c.do("POST", "/v1/streams/m/append", prod, bad)
		require.Equal(t, http.StatusConflict, r.status, string(bad))
		require.EqualValues(t, 14, r.json(t)["seq"], "the problem says where the stream is")
		require.Equal(t, "application/problem+json", r.ctype)
	}
	// Without expectedSeq an append is a plain push, as before.
	require.Equal(t, http.StatusOK, c.do("POST", "/v1/streams/m/append", prod, []byte(`{"text":"!"}`)).status)
	st, _ := w.plane.Stream("m")
	require.NoError(t, st.Close(t.Context()))
	text, _ := w.db.DurableText(t, "m")
	require.Equal(t, "hello 😀 world!", text)
}

func TestBadProducerInputChangesNothing(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serve(t, w)
	prod := token(t, "svc", "producer")
	openHTTP(t, c, w, "m")
	st, _ := w.plane.Stream("m")

	// An unpaired surrogate escape is not text: 400, nothing pushed (encoding/json would have
	// pushed U+FFFD).
	r := c.do("POST", "/v1/streams/m/append", prod, []byte(`{"text":"x\ud83dy"}`))
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Contains(t, r.json(t)["detail"], "unpaired surrogate")
	require.Zero(t, st.Seq())
	require.Equal(t, http.StatusOK, c.do("POST", "/v1/streams/m/append", prod, []byte(`{"text":"\ud83d\ude00"}`)).status, "a paired escape is text")

	// Ingest takes text/plain only.
	for _, ct := range []string{"application/json", "image/png", "text/plain; charset=latin1"} {
		r = c.doType("POST", "/v1/streams/m/ingest", prod, ct, []byte(`{"text":"x"}`))
		require.Equal(t, http.StatusUnsupportedMediaType, r.status, ct)
	}
	require.EqualValues(t, 2, st.Seq())

	// Open of a sealed stream says it is sealed.
	require.NoError(t, st.Close(t.Context()))
	r = c.do("POST", "/v1/streams/m/open", prod, nil)
	require.Equal(t, http.StatusConflict, r.status)
	require.Contains(t, r.json(t)["detail"], "sealed")
	// Cancel of a sealed stream: 409, and the flag stays unset.
	r = c.do("POST", "/v1/streams/m/cancel", token(t, "alice", ""), nil)
	require.Equal(t, http.StatusConflict, r.status)
	var flag bool
	require.NoError(t, w.db.Pool.QueryRow(t.Context(), "SELECT cancel_requested FROM messages WHERE id = 'm'").Scan(&flag))
	require.False(t, flag)
}

func TestIngestIsIdempotentAndEndsOnCancel(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serve(t, w)
	prod := token(t, "svc", "producer")
	openHTTP(t, c, w, "m")
	r := c.doType("POST", "/v1/streams/m/ingest?expectedSeq=0", prod, "text/plain", []byte("first part"))
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	// The retry resends the whole body and more: only the rest is pushed.
	r = c.doType("POST", "/v1/streams/m/ingest?expectedSeq=0", prod, "text/plain", []byte("first part, second"))
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.EqualValues(t, 8, r.json(t)["applied"])
	require.EqualValues(t, 18, r.json(t)["seq"])

	// A reader's cancel ends an ingest that is still sending.
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, c.base+"/v1/streams/m/ingest", pr)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+prod)
	req.Header.Set("Content-Type", "text/plain")
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req) //nolint:bodyclose // the test closes it on receipt
		if err == nil {
			done <- resp
		}
		close(done)
	}()
	_, _ = pw.Write([]byte(" third"))
	st, _ := w.plane.Stream("m")
	eventually.True(t, func() bool { return st.Seq() == 24 })
	require.Equal(t, http.StatusAccepted, c.do("POST", "/v1/streams/m/cancel", token(t, "alice", ""), nil).status)
	select {
	case resp := <-done:
		require.NotNil(t, resp)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var res httpapi.AppendResult
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&res))
		require.True(t, res.Cancelled)
		require.EqualValues(t, 24, res.Seq)
	case <-eventually.Late(t):
		t.Fatal("the ingest did not end when the stream was cancelled")
	}
	_ = pw.Close()
	require.ErrorIs(t, st.Push("late"), producer.ErrCancelled)
	require.NoError(t, st.Close(t.Context()))
	text, status := w.db.DurableText(t, "m")
	require.Equal(t, "first part, second third", text)
	require.Equal(t, "cancelled", status)
}

// The common order "create, subscribe, then open": the reader gets the live tail, one chunk per
// delta, not checkpoint-sized steps from the view.
func TestReaderSubscribedBeforeTheOpenGetsTheLiveTail(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serve(t, w)
	prod := token(t, "svc", "producer")
	require.Equal(t, http.StatusCreated, c.do("POST", "/v1/messages", prod, []byte(`{"id":"m","owner":"alice"}`)).status)
	eventually.True(t, func() bool { _, err := w.view.Get(t.Context(), "m"); return err == nil })
	frames := make(chan producer.Frame, 1024)
	go func() {
		defer close(frames)
		req, _ := http.NewRequestWithContext(t.Context(), "GET", c.base+"/v1/streams/m/events", nil)
		req.Header.Set("Authorization", "Bearer "+token(t, "alice", ""))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		for {
			ev, err := streamtest.ReadSSE(br)
			if err != nil {
				return
			}
			if ev.Data == "" {
				continue
			}
			var f producer.Frame
			if json.Unmarshal([]byte(ev.Data), &f) != nil {
				return
			}
			frames <- f
			if f.Terminal() {
				return
			}
		}
	}()
	first := <-frames
	require.Equal(t, producer.FrameOpen, first.Type, "the reader is in before the open")
	require.Equal(t, http.StatusOK, c.do("POST", "/v1/streams/m/open", prod, nil).status)
	const deltas = 40
	appendDelta := func(i int) {
		require.Equal(t, http.StatusOK, c.do("POST", "/v1/streams/m/append", prod, fmt.Appendf(nil, `{"text":"d%02d "}`, i)).status)
	}
	// The open moves the reader from the view onto the live tail; the first delta's chunk says
	// it got there. Appending the rest without waiting raced the move: on a loaded machine the
	// reader went live after several deltas, which the live plane replays as one chunk.
	got := []producer.Frame{first}
	appendDelta(0)
	for got[len(got)-1].Type != producer.FrameChunk {
		f, ok := <-frames
		require.True(t, ok, "the event stream ended before the first delta: %+v", got)
		got = append(got, f)
	}
	for i := 1; i < deltas; i++ {
		appendDelta(i)
	}
	require.Equal(t, http.StatusOK, c.do("POST", "/v1/streams/m/close", prod, nil).status)
	for f := range frames {
		got = append(got, f)
	}
	text, end := streamtest.Replay(t, "", got)
	require.Equal(t, producer.FrameEnd, end.Type)
	require.Len(t, text, deltas*4)
	chunks := 0
	for _, f := range got {
		if f.Type == producer.FrameChunk {
			chunks++
		}
	}
	require.GreaterOrEqual(t, chunks, deltas-2, "a chunk per delta: the live tail, not the view's checkpoints")
}
