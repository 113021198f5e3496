package httpapi_test

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/auth"
	"github.com/rindle-sh/rindle-go/checkpoint"
)

// tenantToken signs a token of the local issuer in tenant, narrowed to stream when set.
func tenantToken(t testing.TB, tenant, sub, scope, stream string) string {
	t.Helper()
	tok, err := auth.Sign(secret, auth.TokenClaims{Scope: scope, Tenant: tenant, Stream: stream,
		RegisteredClaims: jwt.RegisteredClaims{Subject: sub}}, time.Hour)
	require.NoError(t, err)
	return tok
}

// caller is one column of the access matrix.
type caller struct {
	name   string
	tok    string
	header http.Header // Rindle-Tenant, for an admin acting in another tenant
	role   string      // reader, producer or admin
	home   bool        // acts in tenant a, where the fixtures are
}

// accessRoute is one row: a request on the fixtures named by suffix.
type accessRoute struct {
	name string
	// do sends the request on id, a message id or protocol path of this caller's fixtures.
	do func(c client, who caller, id string) dsReply
	// want is the status in the fixtures' tenant, by role.
	want map[string]int
	// of names the fixture the request is on: live, done, fresh (a message row not yet
	// open), doc (a protocol stream), new (nothing).
	of string
}

func (who caller) with(h http.Header) http.Header {
	out := http.Header{}
	for k, v := range who.header {
		out[k] = v
	}
	for k, v := range h {
		out[k] = v
	}
	return out
}

func accessRoutes() []accessRoute {
	all := func(s int) map[string]int { return map[string]int{"reader": s, "producer": s, "admin": s} }
	writers := func(s int) map[string]int {
		return map[string]int{"reader": http.StatusForbidden, "producer": s, "admin": s}
	}
	js := http.Header{"Content-Type": {"application/json"}}
	return []accessRoute{
		{name: "view", of: "live", want: all(http.StatusOK), do: func(c client, w caller, id string) dsReply {
			return c.ds("GET", "/v1/streams/"+id, w.tok, w.header, "")
		}},
		{name: "view long-poll", of: "live", want: all(http.StatusOK), do: func(c client, w caller, id string) dsReply {
			return c.ds("GET", "/v1/streams/"+id+"?after=0&wait=1ms", w.tok, w.header, "")
		}},
		{name: "events", of: "done", want: all(http.StatusOK), do: func(c client, w caller, id string) dsReply {
			return c.ds("GET", "/v1/streams/"+id+"/events", w.tok, w.header, "")
		}},
		{name: "events ?access_token", of: "done", want: all(http.StatusOK), do: func(c client, w caller, id string) dsReply {
			return c.ds("GET", "/v1/streams/"+id+"/events?access_token="+url.QueryEscape(w.tok), "", w.header, "")
		}},
		{name: "append", of: "live", want: writers(http.StatusOK), do: func(c client, w caller, id string) dsReply {
			return c.ds("POST", "/v1/streams/"+id+"/append", w.tok, w.with(js), `{"text":"!"}`)
		}},
		{name: "ingest", of: "live", want: writers(http.StatusOK), do: func(c client, w caller, id string) dsReply {
			return c.ds("POST", "/v1/streams/"+id+"/ingest", w.tok, w.with(text("text/plain")), "?")
		}},
		{name: "flush", of: "live", want: writers(http.StatusOK), do: func(c client, w caller, id string) dsReply {
			return c.ds("POST", "/v1/streams/"+id+"/flush", w.tok, w.header, "")
		}},
		{name: "cancel", of: "live", want: all(http.StatusAccepted), do: func(c client, w caller, id string) dsReply {
			return c.ds("POST", "/v1/streams/"+id+"/cancel", w.tok, w.header, "")
		}},
		{name: "close", of: "live", want: writers(http.StatusOK), do: func(c client, w caller, id string) dsReply {
			return c.ds("POST", "/v1/streams/"+id+"/close", w.tok, w.header, "")
		}},
		{name: "create", of: "new", want: writers(http.StatusCreated), do: func(c client, w caller, id string) dsReply {
			return c.ds("POST", "/v1/messages", w.tok, w.with(js), `{"id":"`+id+`","owner":"alice"}`)
		}},
		{name: "open", of: "fresh", want: writers(http.StatusOK), do: func(c client, w caller, id string) dsReply {
			return c.ds("POST", "/v1/streams/"+id+"/open", w.tok, w.header, "")
		}},
		{name: "protocol HEAD", of: "doc", want: all(http.StatusOK), do: func(c client, w caller, id string) dsReply {
			return c.ds("HEAD", "/v1/stream/"+id, w.tok, w.header, "")
		}},
		{name: "protocol GET", of: "doc", want: all(http.StatusOK), do: func(c client, w caller, id string) dsReply {
			return c.ds("GET", "/v1/stream/"+id+"?offset=-1", w.tok, w.header, "")
		}},
		{name: "protocol long-poll", of: "doc", want: all(http.StatusOK), do: func(c client, w caller, id string) dsReply {
			return c.ds("GET", "/v1/stream/"+id+"?offset=0000000000000000&live=long-poll", w.tok, w.header, "")
		}},
		{name: "protocol SSE ?access_token", of: "doc", want: all(http.StatusOK), do: func(c client, w caller, id string) dsReply {
			// The doc stream is closed, so its SSE read ends.
			return c.ds("GET", "/v1/stream/"+id+"?offset=-1&live=sse&access_token="+url.QueryEscape(w.tok), "", w.header, "")
		}},
		{name: "protocol append", of: "doc", want: writers(http.StatusConflict), do: func(c client, w caller, id string) dsReply {
			return c.ds("POST", "/v1/stream/"+id, w.tok, w.with(text("text/plain")), "more") // closed: 409 to a writer
		}},
		{name: "protocol create", of: "new", want: writers(http.StatusCreated), do: func(c client, w caller, id string) dsReply {
			return c.ds("PUT", "/v1/stream/"+id, w.tok, w.with(text("text/plain")), "")
		}},
		{name: "protocol DELETE", of: "doc", want: map[string]int{"reader": http.StatusForbidden, "producer": http.StatusForbidden, "admin": http.StatusNoContent},
			do: func(c client, w caller, id string) dsReply {
				return c.ds("DELETE", "/v1/stream/"+id, w.tok, w.header, "")
			}},
	}
}

// The access matrix: two tenants, three roles, every route. In the fixtures' tenant each role
// gets exactly its column's answer. From the other tenant, every answer on another tenant's id is
// the answer on an id that exists nowhere, byte for byte (status, body with the id, header
// names), and nothing of tenant a changes. An admin naming tenant a acts there.
func TestAccessMatrix(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serveStreams(t, w)
	const a, b = "tenant-a", "tenant-b"
	callers := []caller{
		{name: "a reader", tok: tenantToken(t, a, "alice", "", ""), role: "reader", home: true},
		{name: "a producer", tok: tenantToken(t, a, "svc", "producer", ""), role: "producer", home: true},
		{name: "a admin", tok: tenantToken(t, a, "ops", "admin", ""), role: "admin", home: true},
		// The same subject names in the other tenant: a subject is unique within its tenant only.
		{name: "b reader", tok: tenantToken(t, b, "alice", "", ""), role: "reader"},
		{name: "b producer", tok: tenantToken(t, b, "svc", "producer", ""), role: "producer"},
		{name: "b admin", tok: tenantToken(t, b, "ops", "admin", ""), role: "admin"},
		{name: "b admin in a", tok: tenantToken(t, b, "ops", "admin", ""), role: "admin", home: true, header: http.Header{"Rindle-Tenant": {a}}},
	}
	aProd := tenantToken(t, a, "svc", "producer", "")
	aAlice := tenantToken(t, a, "alice", "producer", "") // creates alice's protocol stream
	js := http.Header{"Content-Type": {"application/json"}}
	ok := func(r dsReply, status int) {
		t.Helper()
		require.Equal(t, status, r.status, r.body)
	}
	// fixtures makes tenant a's fixtures for one caller: a live message, a sealed one, a row
	// not yet open, and a closed protocol stream alice owns.
	fixtures := func(n int) map[string]string {
		ids := map[string]string{}
		for _, f := range []string{"live", "done", "fresh", "doc", "new"} {
			ids[f] = fmt.Sprintf("%s-%d", f, n)
		}
		for _, f := range []string{"live", "done", "fresh"} {
			ok(c.ds("POST", "/v1/messages", aProd, js, `{"id":"`+ids[f]+`","owner":"alice"}`), http.StatusCreated)
		}
		for _, f := range []string{"live", "done"} {
			ok(c.ds("POST", "/v1/streams/"+ids[f]+"/open", aProd, nil, ""), http.StatusOK)
			ok(c.ds("POST", "/v1/streams/"+ids[f]+"/append", aProd, js, `{"text":"hello"}`), http.StatusOK)
		}
		ok(c.ds("POST", "/v1/streams/"+ids["done"]+"/close", aProd, nil, ""), http.StatusOK)
		ok(c.ds("PUT", "/v1/stream/"+ids["doc"], aAlice, http.Header{"Content-Type": {"text/plain"}, "Stream-Closed": {"true"}}, "hi"), http.StatusCreated)
		return ids
	}
	// normalize keeps what a client can compare: status, body with the id replaced, the
	// header names (values such as Date differ by time).
	type answer struct {
		status int
		body   string
		names  []string
	}
	normalize := func(r dsReply, id string) answer {
		var names []string
		for k := range r.h {
			if k != "Date" && k != "Content-Length" {
				names = append(names, k)
			}
		}
		slices.Sort(names)
		return answer{r.status, strings.ReplaceAll(r.body, id, "ID"), names}
	}

	for n, who := range callers {
		ids := fixtures(n)
		for _, route := range accessRoutes() {
			id := ids[route.of]
			got := route.do(c, who, id)
			if who.home {
				require.Equal(t, route.want[who.role], got.status, "%s: %s: %s", who.name, route.name, got.body)
				continue
			}
			// Another tenant: the reference is the same request on an id that exists nowhere.
			nowhere := "nowhere-" + id
			ref := route.do(c, who, nowhere)
			require.Equal(t, normalize(ref, nowhere), normalize(got, id), "%s: %s: another tenant's id answers as a missing one", who.name, route.name)
			if route.of != "new" {
				require.Contains(t, []int{http.StatusForbidden, http.StatusNotFound, http.StatusConflict}, got.status,
					"%s: %s: refused", who.name, route.name)
			}
		}
		if !who.home {
			// Tenant a's fixtures are as they were made: the live stream's own answer says
			// it is neither cancelled nor closed and holds only its text. (Not the view: it
			// follows the CDC reader, which may not have seen the open yet.)
			st := c.ds("POST", "/v1/streams/"+ids["live"]+"/append", aProd, js, `{"text":""}`)
			require.Equal(t, http.StatusOK, st.status, "not cancelled, not closed: %s", st.body)
			require.Contains(t, st.body, `"seq":5`, "nothing appended from the other tenant")
			ok(c.ds("HEAD", "/v1/stream/"+ids["doc"], aProd, nil, ""), http.StatusOK)
			ok(c.ds("POST", "/v1/streams/"+ids["fresh"]+"/open", aProd, nil, ""), http.StatusOK)
		}
	}
}

// A token narrowed to one stream touches that stream and nothing else: a browser-side writer
// of one protocol document, or a producer of one answer.
func TestNarrowedTokens(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serveStreams(t, w)
	prod := tenantToken(t, "t", "svc", "producer", "")
	js := http.Header{"Content-Type": {"application/json"}}
	for _, id := range []string{"mine", "theirs"} {
		require.Equal(t, http.StatusCreated, c.ds("POST", "/v1/messages", prod, js, `{"id":"`+id+`","owner":"alice"}`).status)
		require.Equal(t, http.StatusOK, c.ds("POST", "/v1/streams/"+id+"/open", prod, nil, "").status)
		require.Equal(t, http.StatusCreated, c.ds("PUT", "/v1/stream/docs/"+id, prod, text("text/plain"), "").status)
	}
	one := tenantToken(t, "t", "browser", "producer", "mine")
	doc := tenantToken(t, "t", "browser", "producer", "docs/mine")

	require.Equal(t, http.StatusOK, c.ds("POST", "/v1/streams/mine/append", one, js, `{"text":"a"}`).status)
	r := c.ds("POST", "/v1/streams/theirs/append", one, js, `{"text":"a"}`)
	require.Equal(t, http.StatusForbidden, r.status)
	require.Contains(t, r.body, `may touch only stream \"mine\"`)
	require.Equal(t, http.StatusForbidden, c.ds("POST", "/v1/messages", one, js, `{"id":"other","owner":"alice"}`).status)
	require.Equal(t, http.StatusForbidden, c.ds("POST", "/v1/messages", one, js, `{"owner":"alice"}`).status, "a generated id is not its stream")
	require.Equal(t, http.StatusOK, c.ds("GET", "/v1/streams/mine", one, nil, "").status)
	require.Equal(t, http.StatusForbidden, c.ds("GET", "/v1/streams/theirs", one, nil, "").status)

	require.Equal(t, http.StatusNoContent, c.ds("POST", "/v1/stream/docs/mine", doc, text("text/plain"), "x").status)
	require.Equal(t, http.StatusNotFound, c.ds("POST", "/v1/stream/docs/theirs", doc, text("text/plain"), "x").status)
	require.Equal(t, http.StatusNotFound, c.ds("GET", "/v1/stream/docs/theirs", doc, nil, "").status)
	require.Equal(t, http.StatusNotFound, c.ds("PUT", "/v1/stream/docs/new", doc, text("text/plain"), "").status)
	require.Equal(t, http.StatusForbidden, c.ds("DELETE", "/v1/stream/docs/mine", doc, nil, "").status, "deleting needs admin")
}

// Bearer is case-insensitive (RFC 6750 uses RFC 7235's auth-scheme); a token in the query is
// taken only on GET and HEAD; only an admin may name a tenant; the tenant separator is refused
// in ids.
func TestTokenPlacementAndTenantHeader(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serveStreams(t, w)
	prod := tenantToken(t, "t", "svc", "producer", "")
	js := http.Header{"Content-Type": {"application/json"}}
	for _, scheme := range []string{"Bearer", "bearer", "BEARER"} {
		r := c.ds("POST", "/v1/messages", "", http.Header{"Content-Type": {"application/json"}, "Authorization": {scheme + " " + prod}},
			`{"owner":"alice"}`)
		require.Equal(t, http.StatusCreated, r.status, "%s: %s", scheme, r.body)
	}
	r := c.ds("POST", "/v1/stream/q?access_token="+url.QueryEscape(prod), "", text("text/plain"), "")
	require.Equal(t, http.StatusUnauthorized, r.status, "no write takes a query token: %s", r.body)
	r = c.ds("PUT", "/v1/stream/q?access_token="+url.QueryEscape(prod), "", text("text/plain"), "")
	require.Equal(t, http.StatusUnauthorized, r.status)

	r = c.ds("POST", "/v1/messages", prod, js.Clone(), `{"owner":"alice"}`)
	require.Equal(t, http.StatusCreated, r.status)
	h := js.Clone()
	h.Set("Rindle-Tenant", "other")
	r = c.ds("POST", "/v1/messages", prod, h, `{"owner":"alice"}`)
	require.Equal(t, http.StatusForbidden, r.status)
	require.Contains(t, r.body, "only an admin token may name a tenant")
	h.Set("Rindle-Tenant", strings.Repeat("t", auth.MaxTenantBytes+1))
	r = c.ds("POST", "/v1/messages", tenantToken(t, "t", "ops", "admin", ""), h, `{"owner":"alice"}`)
	require.Equal(t, http.StatusBadRequest, r.status, r.body)

	r = c.ds("POST", "/v1/messages", prod, js, `{"id":"x\u001fy","owner":"alice"}`)
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Contains(t, r.body, "U+001F")
	require.Equal(t, http.StatusBadRequest, c.ds("GET", "/v1/streams/x%1Fy", prod, nil, "").status)
	require.Equal(t, http.StatusBadRequest, c.ds("GET", "/v1/stream/x%1Fy", prod, nil, "").status)
}

// Rows written before tenants existed (the last release's, here written as it wrote them, in
// SQL, and through the protocol store) are the default tenant's: a token without a tenant reads them as before, and no tenant's
// token sees them. Tenants need no migration: the default tenant's keys are the ids themselves.
func TestLastReleasesRowsAreTheDefaultTenants(t *testing.T) {
	t.Parallel()
	w := setup(t)
	c := serveStreams(t, w)
	ctx := t.Context()
	_, err := w.db.Pool.Exec(ctx, `INSERT INTO messages (id, owner, body, seq, status) VALUES ('old-1', 'alice', 'from the last release', 21, 'complete')`)
	require.NoError(t, err)
	// The protocol store's writes did not change: its own Create writes a last-release stream.
	streams, err := checkpoint.NewProtocol(checkpoint.ProtocolConfig{Pool: w.db.Pool})
	require.NoError(t, err)
	_, created, err := streams.Create(ctx, checkpoint.CreateStream{Path: "old/doc", Owner: "alice", ContentType: "text/plain", Text: "doc text",
		SameType: func(a, b string) bool { return a == b }})
	require.NoError(t, err)
	require.True(t, created)

	alice := token(t, "alice", "")
	r := c.ds("GET", "/v1/streams/old-1", alice, nil, "")
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, `"text":"from the last release"`)
	require.Contains(t, r.body, `"id":"old-1"`)
	r = c.ds("GET", "/v1/stream/old/doc?offset=-1", alice, nil, "")
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, "doc text", r.body)

	tenantAlice := tenantToken(t, "acme", "alice", "", "")
	require.Equal(t, http.StatusForbidden, c.ds("GET", "/v1/streams/old-1", tenantAlice, nil, "").status)
	require.Equal(t, http.StatusNotFound, c.ds("GET", "/v1/stream/old/doc?offset=-1", tenantAlice, nil, "").status)
}
