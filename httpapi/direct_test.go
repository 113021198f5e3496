package httpapi_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/httpapi"
	"github.com/rindle-sh/rindle-go/internal/eventually"
	"github.com/rindle-sh/rindle-go/internal/streamtest"
	"github.com/rindle-sh/rindle-go/producer"
)

// Issue 23: an event stream read over HTTP/1.1 on this instance's live tail is handed to the
// DirectWriter: the head keeps the headers set before it (CORS) and says the
// response ends with the connection; the join's frames, then every delta, then the end frame
// arrive in order, written by the writers; the connection closes after the end. Over HTTP/2
// (TLS) the same stream is written through net/http as before.
func TestEventStreamsOnTheLiveTailAreWrittenDirectly(t *testing.T) {
	t.Parallel()
	w := setup(t)
	d := producer.NewDirectWriter(producer.DirectConfig{Writers: 2})
	change := func(c *httpapi.Config) {
		c.Direct = d
		c.AllowedOrigins = []string{"https://app.example"}
	}
	c, srv := serveServer(t, w, change)
	// After the server's cleanup is registered, so it runs first: a hijacked reader's handler
	// returns when the writer closes, and the test server's Close waits for it.
	t.Cleanup(d.Close)
	prod := token(t, "svc", "producer")
	require.Equal(t, http.StatusCreated, c.do("POST", "/v1/messages", prod, []byte(`{"id":"m","owner":"alice"}`)).status)
	eventually.True(t, func() bool { _, err := w.view.Get(t.Context(), "m"); return err == nil })
	require.Equal(t, http.StatusOK, c.do("POST", "/v1/streams/m/open", prod, nil).status)
	require.Equal(t, http.StatusOK, c.do("POST", "/v1/streams/m/append", prod, []byte(`{"text":"before "}`)).status)

	read := func(client *http.Client, base string) (*http.Response, *bufio.Reader) {
		req, err := http.NewRequestWithContext(t.Context(), "GET", base+"/v1/streams/m/events", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token(t, "alice", ""))
		req.Header.Set("Origin", "https://app.example")
		resp, err := client.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { _ = resp.Body.Close() })
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "https://app.example", resp.Header.Get("Access-Control-Allow-Origin"))
		require.Contains(t, resp.Header.Get("Content-Type"), "text/event-stream")
		return resp, bufio.NewReader(resp.Body)
	}
	direct, directBody := read(http.DefaultClient, c.base) //nolint:bodyclose // closed in the helper's cleanup
	require.True(t, direct.Close, "HTTP/1.1: the response ends with the connection")
	require.Equal(t, "HTTP/1.1", direct.Proto)
	eventually.True(t, func() bool { return d.Stats().Readers == 1 }, "the reader went to the direct writer")

	tlsServer := httptest.NewUnstartedServer(srv.Handler())
	tlsServer.EnableHTTP2 = true
	tlsServer.StartTLS()
	t.Cleanup(tlsServer.Close)
	h2, h2Body := read(tlsServer.Client(), tlsServer.URL) //nolint:bodyclose // closed in the helper's cleanup
	require.Equal(t, 2, h2.ProtoMajor)

	const deltas = 50
	for i := range deltas {
		require.Equal(t, http.StatusOK, c.do("POST", "/v1/streams/m/append", prod, fmt.Appendf(nil, `{"text":"d%02d "}`, i)).status)
	}
	require.Equal(t, http.StatusOK, c.do("POST", "/v1/streams/m/close", prod, nil).status)
	want := "before "
	for i := range deltas {
		want += fmt.Sprintf("d%02d ", i)
	}
	for _, body := range []*bufio.Reader{directBody, h2Body} {
		var frames []producer.Frame
		for {
			f, err := streamtest.ReadFrame(body)
			require.NoError(t, err)
			frames = append(frames, f)
			if f.Terminal() {
				break
			}
		}
		require.Equal(t, "m", frames[0].StreamID)
		text, end := streamtest.Replay(t, "", frames)
		require.Equal(t, producer.FrameEnd, end.Type)
		require.Equal(t, want, text)
	}
	_, err := io.ReadAll(directBody)
	require.NoError(t, err, "the direct response ends at the connection's close")
	st := d.Stats()
	require.Positive(t, st.FastWrites)
	eventually.True(t, func() bool { return d.Stats().Readers == 0 })
}

// A direct reader's handler returns once the writer has it, yet the reader keeps its waiting
// slot until it ends: a subject at its cap of one gets 429 while it reads, and the slot comes
// back when the client hangs up, with nothing pushed to notice it by.
func TestADirectReaderHoldsItsSlotAndNoHandler(t *testing.T) {
	t.Parallel()
	w := setup(t)
	d := producer.NewDirectWriter(producer.DirectConfig{Writers: 1})
	c, _ := serveServer(t, w, func(cfg *httpapi.Config) {
		cfg.Direct = d
		cfg.MaxEventStreamsPerSubject = 1
	})
	t.Cleanup(d.Close)
	openHTTP(t, c, w, "m")
	alice := token(t, "alice", "")
	read := func() *http.Response {
		req, err := http.NewRequestWithContext(t.Context(), "GET", c.base+"/v1/streams/m/events", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+alice)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { _ = resp.Body.Close() })
		return resp
	}
	first := read()
	require.Equal(t, http.StatusOK, first.StatusCode)
	require.True(t, first.Close, "the direct writer has it")
	f, err := streamtest.ReadFrame(bufio.NewReader(first.Body))
	require.NoError(t, err)
	require.Equal(t, producer.FrameOpen, f.Type)
	eventually.True(t, func() bool { return !handlerServing("serveDirect") },
		"the handler returned once it handed the reader over")
	require.Equal(t, int64(1), d.Stats().Readers)
	require.Equal(t, http.StatusTooManyRequests, read().StatusCode, "the direct reader holds alice's slot") //nolint:bodyclose // closed in the helper's cleanup

	require.NoError(t, first.Body.Close())
	eventually.True(t, func() bool { return d.Stats().Readers == 0 }, "the hang-up ended the reader")
	again := read() //nolint:bodyclose // closed in the helper's cleanup
	require.Equal(t, http.StatusOK, again.StatusCode, "the slot came back")
}

// handlerServing reports whether any goroutine's stack is in a function whose name holds fn.
func handlerServing(fn string) bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Contains(string(buf[:n]), fn)
		}
		buf = make([]byte, 2*len(buf))
	}
}
