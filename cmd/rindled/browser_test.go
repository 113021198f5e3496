package main

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/internal/pgtest"
)

// browser starts headless Chromium. Without the binary the test skips, unless
// RINDLE_REQUIRE_BROWSER is set (as .ci/run sets it), where a missing browser fails.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv("RINDLE_REQUIRE_BROWSER") != "" {
			t.Fatal("no Chromium on PATH (apt-get install -y chromium)")
		}
		t.Skip("no Chromium on PATH (apt-get install -y chromium); set RINDLE_REQUIRE_BROWSER=1 to fail instead")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // root, in a container
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	// Chromium's first start on a loaded machine can miss chromedp's handshake: try thrice,
	// each start abandoned after 90 s. The browser lives as long as the context of its first
	// Run, so that bound is a timer that cancels a start still under way, not a deadline on the
	// context the test then uses: the test's waits are bounded only by the test binary's own
	// deadline (a hang bound), since a loaded machine may take long to stream an answer.
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		bctx, cancel := chromedp.NewContext(actx)
		abandon := time.AfterFunc(90*time.Second, cancel)
		err = chromedp.Do(bctx)
		if abandon.Stop() && err == nil {
			ctx, cancelDeadline := bctx, context.CancelFunc(func() {})
			if d, ok := t.Deadline(); ok {
				ctx, cancelDeadline = context.WithDeadline(bctx, d.Add(-30*time.Second))
			}
			t.Cleanup(func() { cancelDeadline(); cancel(); cancelAlloc() })
			return ctx
		}
		if err == nil {
			err = errors.New("the start was abandoned after 90 s")
		}
		cancel()
		cancelAlloc()
		t.Logf("starting Chromium, attempt %d: %v", attempt, err)
	}
	t.Fatalf("start Chromium: %v", err)
	return nil
}

// waitJS polls a JavaScript expression until it is true.
func waitJS(t *testing.T, ctx context.Context, expr string) {
	t.Helper()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond)))
	require.NoError(t, err, "waiting for %s", expr)
}

func text(t *testing.T, ctx context.Context, id string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById(`+strconv.Quote(id)+`).textContent`))
	require.NoError(t, err)
	return s
}

// TestDemoPageResumesAfterReloadInABrowser opens the demo in headless Chromium, watches an
// answer stream, reloads mid-answer, and checks that the text on screen ends equal to the
// stored body, then cancels a second answer.
func TestDemoPageResumesAfterReloadInABrowser(t *testing.T) {
	ctx := browser(t)
	db := pgtest.NewDB(t)
	srv := startRindled(t, db, "-demo", "true")

	// 600 pieces at 120/s: about 5 s of answer.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.base+"/?tokens=600&rate=120"), chromedp.Click("#ask")))
	waitJS(t, ctx, `Number(document.getElementById("seq").textContent) > 300`)
	id := text(t, ctx, "stream-id")
	before, err := strconv.Atoi(text(t, ctx, "seq"))
	require.NoError(t, err)

	require.NoError(t, chromedp.Do(ctx, chromedp.Reload()))
	waitJS(t, ctx, `document.getElementById("note").textContent.startsWith("resumed at")`)
	resumedAt, err := strconv.Atoi(text(t, ctx, "note")[len("resumed at "):])
	require.NoError(t, err)
	require.GreaterOrEqual(t, resumedAt, before, "the reload kept what the page held and resumed there")

	waitJS(t, ctx, `document.body.dataset.verified !== undefined`)
	require.Empty(t, attr(t, ctx, "broken"), "every chunk continued what the page held")
	require.Equal(t, "complete", text(t, ctx, "status"))
	stored, status := db.DurableText(t, id)
	require.Equal(t, "complete", status)
	onScreen := text(t, ctx, "text")
	require.Equal(t, stored, onScreen, "the text on screen equals the stored body")
	require.Greater(t, len(onScreen), resumedAt, "the answer went on after the reload")
	require.Equal(t, "equal", attr(t, ctx, "verified"), "the page's own check agrees")
	require.Equal(t, text(t, ctx, "seq"), text(t, ctx, "durable"), "everything shown is durable at the end")

	// Cancel a second, slower answer mid-stream.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.base+"/?tokens=5000&rate=50"), chromedp.Click("#ask")))
	waitJS(t, ctx, `document.getElementById("stream-id").textContent !== `+strconv.Quote(id)+` && Number(document.getElementById("seq").textContent) > 20`)
	second := text(t, ctx, "stream-id")
	require.NoError(t, chromedp.Do(ctx, chromedp.Click("#cancel")))
	waitJS(t, ctx, `document.body.dataset.verified !== undefined`)
	require.Equal(t, "cancelled", text(t, ctx, "status"))
	stored, status = db.DurableText(t, second)
	require.Equal(t, "cancelled", status)
	require.Equal(t, stored, text(t, ctx, "text"))
	require.Less(t, len(stored), 5000, "the generation stopped early")
}

func attr(t *testing.T, ctx context.Context, key string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.dataset.`+key+` || ""`))
	require.NoError(t, err)
	return s
}

// TestDemoPageSurvivesItsProducerKilled: the page reads through rindle-streams while the
// instance producing the answer is killed with SIGKILL mid-answer and restarted. The client's
// reconnects fail, then land on the new process, which sealed the stream interrupted at start
// (same host id); the page ends with exactly the durable text and says interrupted.
func TestDemoPageSurvivesItsProducerKilled(t *testing.T) {
	ctx := browser(t)
	db := pgtest.NewDB(t)
	t.Cleanup(func() { dropSlot(t, db) }) // after both processes stopped: the slot outlives them
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	bin := buildRindled(t)
	args := []string{"-addr", addr, "-slot", db.Slot(), "-host-id", "demo-host", "-demo", "true", "-drain-timeout", "5s"}
	env := []string{"DATABASE_URL=" + db.URL, "RINDLE_JWT_SECRET=" + testSecret}
	first := spawn(t, "first", bin, args, env)

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(first.base+"/?tokens=3000&rate=60"), chromedp.Click("#ask")))
	waitJS(t, ctx, `Number(document.getElementById("durable").textContent) > 100`)
	id := text(t, ctx, "stream-id")
	first.kill(t)
	second := spawn(t, "second", bin, args, env)
	require.Equal(t, first.base, second.base)

	waitJS(t, ctx, `document.body.dataset.verified !== undefined`)
	require.Empty(t, attr(t, ctx, "broken"))
	require.Equal(t, "interrupted", text(t, ctx, "status"))
	stored, status := db.DurableText(t, id)
	require.Equal(t, "interrupted", status)
	require.Equal(t, stored, text(t, ctx, "text"), "the page ends with exactly the durable text")
	require.Equal(t, "equal", attr(t, ctx, "verified"))
	require.Greater(t, len(stored), 100)
}
