package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	apiclient "github.com/rindle-sh/rindle-go/httpapi/client"
	"github.com/rindle-sh/rindle-go/producer"
)

var update = flag.Bool("update", false, "rewrite client/openapi.json and client/openapi-3.0.json from the served documents") //nolint:gochecknoglobals // test flag

// TestGeneratedClientDrivesTheAPI: the client generated from the served document drives
// create → open → append → subscribe → close, and the committed document is what the server
// serves today.
func TestGeneratedClientDrivesTheAPI(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serveStreams(t, w) // with the protocol, which the document describes too
	ctx := t.Context()

	// Both served documents are committed: the generators read them, and CI lints them.
	for _, doc := range []string{"openapi-3.0.json", "openapi.json"} {
		served := c.do("GET", "/"+doc, "", nil)
		require.Equal(t, http.StatusOK, served.status)
		if *update {
			require.NoError(t, os.WriteFile("client/"+doc, served.body, 0o644))
		}
		committed, err := os.ReadFile("client/" + doc)
		require.NoError(t, err)
		require.JSONEq(t, string(committed), string(served.body), "the API changed: regenerate httpapi/client (see its package doc)")
	}

	bearer := func(tok string) apiclient.ClientOption {
		return apiclient.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+tok)
			return nil
		})
	}
	prod, err := apiclient.NewClientWithResponses(c.base, bearer(token(t, "svc", "producer")))
	require.NoError(t, err)
	reader, err := apiclient.NewClientWithResponses(c.base, bearer(token(t, "alice", "")))
	require.NoError(t, err)

	id := "gen-1"
	created, err := prod.CreateMessageWithResponse(ctx, apiclient.CreateBody{Id: &id, Owner: "alice"})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, created.StatusCode(), string(created.Body))
	require.Equal(t, id, created.JSON201.Id)

	opened, err := prod.OpenStreamWithResponse(ctx, id)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, opened.StatusCode(), string(opened.Body))

	at := int64(0)
	appended, err := prod.AppendStreamWithResponse(ctx, id, apiclient.AppendBody{Text: "generated 😀", ExpectedSeq: &at})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, appended.StatusCode(), string(appended.Body))
	require.EqualValues(t, 12, appended.JSON200.Seq)
	require.EqualValues(t, 12, appended.JSON200.Applied)
	// The same request again (its answer lost, say) is absorbed, not doubled.
	again, err := prod.AppendStreamWithResponse(ctx, id, apiclient.AppendBody{Text: "generated 😀", ExpectedSeq: &at})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, again.StatusCode(), string(again.Body))
	require.EqualValues(t, 12, again.JSON200.Seq)
	require.EqualValues(t, 0, again.JSON200.Applied)
	// Text that cannot start where its producer believes is refused with 409, and the
	// generated client reads where to resume (ConflictError; ErrorModel could not carry it).
	wrong := int64(5)
	refused, err := prod.AppendStreamWithResponse(ctx, id, apiclient.AppendBody{Text: "elsewhere", ExpectedSeq: &wrong})
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, refused.StatusCode(), string(refused.Body))
	require.NotNil(t, refused.ApplicationproblemJSON409, "%s", refused.Body)
	require.EqualValues(t, 12, refused.ApplicationproblemJSON409.Seq)
	require.Nil(t, refused.ApplicationproblemJSON409.Cancelled, "not cancelled: omitted")

	// Subscribe through the generated client's raw event stream, then close.
	from := int64(0)
	resp, err := reader.StreamEvents(ctx, id, &apiclient.StreamEventsParams{From: &from})
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	closed, err := prod.CloseStreamWithResponse(ctx, id, apiclient.CloseBody{})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, closed.StatusCode(), string(closed.Body))

	text := ""
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		data, ok := strings.CutPrefix(lines.Text(), "data: ")
		if !ok {
			continue
		}
		var f producer.Frame
		require.NoError(t, json.Unmarshal([]byte(data), &f))
		text, err = producer.Splice(text, f)
		require.NoError(t, err)
		if f.Terminal() {
			require.Equal(t, producer.FrameEnd, f.Type)
			break
		}
	}
	require.Equal(t, "generated 😀", text)

	// A durable-only reader long-polls the view until replication has brought all 12 units.
	after, wait := int64(11), "10s"
	view, err := reader.GetStreamWithResponse(ctx, id, &apiclient.GetStreamParams{After: &after, Wait: &wait})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, view.StatusCode())
	require.Equal(t, "generated 😀", view.JSON200.Text)

	denied, err := apiclient.NewClientWithResponses(c.base, bearer(token(t, "mallory", "")))
	require.NoError(t, err)
	forbidden, err := denied.GetStreamWithResponse(ctx, id, &apiclient.GetStreamParams{})
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, forbidden.StatusCode())
	require.NotNil(t, forbidden.ApplicationproblemJSON403, "problem details decode as the documented error model")

	// The Durable Streams protocol is in the document too: a generated client creates, forks
	// and reads a stream with it.
	src, forked := "gen-src", "gen-fork"
	made, err := prod.StreamCreateWithBodyWithResponse(ctx, src, &apiclient.StreamCreateParams{}, "text/plain", strings.NewReader("generated"))
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, made.StatusCode(), string(made.Body))
	source := src
	made, err = prod.StreamCreateWithBodyWithResponse(ctx, forked, &apiclient.StreamCreateParams{StreamForkedFrom: &source}, "text/plain", strings.NewReader(" fork"))
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, made.StatusCode(), string(made.Body))
	start := "-1"
	read, err := prod.StreamReadWithResponse(ctx, forked, &apiclient.StreamReadParams{Offset: &start})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, read.StatusCode())
	require.Equal(t, "generated fork", string(read.Body))
	requireOffset(t, 14, read.HTTPResponse.Header.Get("Stream-Next-Offset"))
}
