// Package demo owns the page rindled serves at / and the synthetic generator behind it: a chat
// view that asks the server for an answer, watches it stream over EventSource, shows the live
// seq, the durable seq and the durability lag, resumes after a reload from the offset it holds,
// and cancels. The answer is produced by this process's live plane at a realistic token rate,
// with multi-byte and emoji text, so a fresh `go run ./cmd/rindled` shows the whole path.
//
// It owns no durable state and no auth rules: it creates message rows and streams through the
// same Plane and tables as the API, and hands the page a short-lived reader token for a fresh
// subject that owns only that message. The page uses only the public API (events, view,
// cancel). Start runs each generation on its own goroutine; Stop ends them all (a drain has
// already sealed their streams interrupted).
package demo

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/producer"
)

//go:embed index.html
var page []byte

// client is rindle-streams (clients/ts) bundled for the page: `npm run build` there writes it,
// and CI checks the committed file is what the sources build.
//
//go:embed rindle-client.js
var client []byte

// Defaults and bounds of an answer.
const (
	DefaultTokens     = 400
	MaxTokens         = 5000
	DefaultRate       = 40 // tokens per second, a typical model's pace
	MaxRate           = 2000
	DefaultMaxRunning = 16
	DefaultMaxKept    = 1000
	TokenTTL          = time.Hour
)

// Config configures a Demo.
type Config struct {
	// Plane produces the answers. Required.
	Plane *producer.Plane
	// Messages writes the message rows, in the app's mapping. Required.
	Messages *checkpoint.Catalog
	// Mint signs a reader token for subject (httpapi.NewToken with the server's secret). Required.
	Mint func(subject string, ttl time.Duration) (string, error)
	// MaxRunning bounds concurrent generations; past it a start gets 429. Defaults to
	// DefaultMaxRunning.
	MaxRunning int
	// MaxKept bounds the finished answers whose rows the demo keeps: past it, it deletes the
	// oldest (anyone may start a demo answer, so its rows must not grow without bound).
	// Defaults to DefaultMaxKept.
	MaxKept int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Demo serves the page and runs generations.
type Demo struct {
	cfg     Config
	ctx     context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	running int
	kept    []string // finished answers' ids, oldest first
}

// New validates cfg.
func New(cfg Config) (*Demo, error) {
	switch {
	case cfg.Plane == nil:
		return nil, errors.New("demo: Config.Plane is required")
	case cfg.Messages == nil:
		return nil, errors.New("demo: Config.Messages is required")
	case cfg.Mint == nil:
		return nil, errors.New("demo: Config.Mint is required")
	case cfg.MaxRunning < 0:
		return nil, errors.New("demo: Config.MaxRunning must not be negative")
	case cfg.MaxKept < 0:
		return nil, errors.New("demo: Config.MaxKept must not be negative")
	}
	if cfg.MaxRunning == 0 {
		cfg.MaxRunning = DefaultMaxRunning
	}
	if cfg.MaxKept == 0 {
		cfg.MaxKept = DefaultMaxKept
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Demo{cfg: cfg, ctx: ctx, stop: stop}, nil
}

// Register adds GET / (the page) and POST /demo/answers (start an answer) to mux.
func (d *Demo) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(page)
	})
	mux.HandleFunc("GET /demo/rindle-client.js", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		_, _ = w.Write(client)
	})
	mux.HandleFunc("POST /demo/answers", d.start)
}

// Stop ends every generation and waits for them.
func (d *Demo) Stop() {
	d.stop()
	d.wg.Wait()
}

// Started is the answer to POST /demo/answers.
type Started struct {
	ID    string `json:"id"`
	Token string `json:"token"`
	Owner string `json:"owner"`
}

type problem struct {
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

func writeProblem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(problem{Title: http.StatusText(status), Status: status, Detail: detail})
}

// start creates a message owned by a fresh subject, opens its stream here, and generates an
// answer of ?tokens= pieces at ?rate= pieces per second.
func (d *Demo) start(w http.ResponseWriter, r *http.Request) {
	tokens, err := intParam(r, "tokens", DefaultTokens, 1, MaxTokens)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, err.Error())
		return
	}
	rate, err := intParam(r, "rate", DefaultRate, 1, MaxRate)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, err.Error())
		return
	}
	d.mu.Lock()
	if d.running >= d.cfg.MaxRunning {
		d.mu.Unlock()
		writeProblem(w, http.StatusTooManyRequests, fmt.Sprintf("%d demo answers are already streaming; try again when one ends", d.cfg.MaxRunning))
		return
	}
	d.running++
	d.mu.Unlock()
	release := func() {
		d.mu.Lock()
		d.running--
		d.mu.Unlock()
	}

	suffix := strings.ToLower(rand.Text()[:10])
	st := Started{ID: "demo-" + suffix, Owner: "demo-reader-" + suffix}
	if st.Token, err = d.cfg.Mint(st.Owner, TokenTTL); err != nil {
		release()
		writeProblem(w, http.StatusInternalServerError, err.Error())
		return
	}
	// The driver's and the plane's words stay in the log: they name hosts, users and sockets.
	if _, err := d.cfg.Messages.Create(r.Context(), checkpoint.NewMessage{ID: st.ID, Owner: st.Owner, Role: "assistant"}); err != nil {
		release()
		d.cfg.Logger.Warn("demo: create message", "err", err)
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, "the database is unavailable: retry")
		return
	}
	stream, err := d.cfg.Plane.Open(r.Context(), producer.OpenStreamInput{StreamID: st.ID})
	if err != nil {
		release()
		d.cfg.Logger.Warn("demo: open stream", "stream", st.ID, "err", err)
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, "the stream could not be opened: retry")
		return
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer release()
		d.generate(stream, tokens, rate)
	}()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(st)
}

func (d *Demo) generate(st *producer.LiveStream, tokens, rate int) {
	err := st.Pump(d.ctx, Answer(d.ctx, mrand.Uint64(), tokens, time.Second/time.Duration(rate)))
	sealCtx, cancel := context.WithTimeout(context.WithoutCancel(d.ctx), 30*time.Second)
	defer cancel()
	switch {
	case errors.Is(err, producer.ErrClosed):
		d.keep(sealCtx, st.ID()) // drained: sealed interrupted already
		return
	case err != nil:
		err = st.Fail(sealCtx, err)
	default:
		err = st.Close(sealCtx)
	}
	if err != nil && !errors.Is(err, producer.ErrClosed) {
		d.cfg.Logger.Warn("demo: sealing an answer", "stream", st.ID(), "err", err)
	}
	d.keep(sealCtx, st.ID())
}

// keep records a finished answer and deletes the oldest rows past MaxKept.
func (d *Demo) keep(ctx context.Context, id string) {
	d.mu.Lock()
	d.kept = append(d.kept, id)
	var drop []string
	if over := len(d.kept) - d.cfg.MaxKept; over > 0 {
		drop = append(drop, d.kept[:over]...)
		d.kept = append(d.kept[:0], d.kept[over:]...)
	}
	d.mu.Unlock()
	if len(drop) > 0 {
		if err := d.cfg.Messages.DeleteSealed(ctx, drop); err != nil {
			d.cfg.Logger.Warn("demo: deleting old answers", "count", len(drop), "err", err)
		}
	}
}

func intParam(r *http.Request, name string, def, lo, hi int) (int, error) {
	raw := r.URL.Query().Get(name)
	if raw == "" {
		return def, nil
	}
	v, err := strconv.Atoi(raw)
	if err != nil || v < lo || v > hi {
		return 0, fmt.Errorf("%s %q must be an integer in [%d, %d]", name, raw, lo, hi)
	}
	return v, nil
}

// phrases are the generator's vocabulary: ASCII, accented Latin, CJK, right-to-left, astral
// symbols (surrogate pairs in UTF-16) and emoji ZWJ sequences, so offsets and splits are
// exercised the way real multilingual answers exercise them.
var phrases = []string{ //nolint:gochecknoglobals // read-only vocabulary
	"Durable streams keep every token.", "A reader may join late", "and reconnect at will;",
	"the offset counts UTF-16 code units.", "Crème brûlée, naïve café, façade, smørrebrød.",
	"日本語のテキストも流れます。", "中文也一样。", "한국어 문장도 있습니다.", "שלום עולם", "مرحبا بالعالم",
	"Emoji: 🙂 🚀 🧪 🐘", "family: 👩‍👩‍👧‍👦", "flags: 🇫🇷 🇯🇵", "math: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ∑ ∞ ≤ ≥",
	"Checkpoints are coarse;", "the live plane fans out every delta.", "Postgres holds the chunks,",
	"logical replication carries them on.", "Ünïcödé is not an edge case.", "Ελληνικά γράμματα.",
	"Кириллица тоже.", "skin tones: 👋🏽 👍🏿", "keycap: 1️⃣ 2️⃣",
}

// Answer yields a synthetic answer of n tokens, one every interval: pieces of one to six
// characters (never a split character), words and spaces, as a model's stream does. It stops
// when ctx ends. seed makes it reproducible.
func Answer(ctx context.Context, seed uint64, n int, interval time.Duration) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		rng := mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		var pending []rune
		var tick *time.Ticker
		if interval > 0 {
			tick = time.NewTicker(interval)
			defer tick.Stop()
		}
		for range n {
			for len(pending) < 6 {
				pending = append(pending, []rune(phrases[rng.IntN(len(phrases))]+" ")...)
			}
			k := 1 + rng.IntN(6)
			piece := string(pending[:k])
			pending = pending[k:]
			if tick != nil {
				select {
				case <-tick.C:
				case <-ctx.Done():
					yield("", context.Cause(ctx))
					return
				}
			}
			if !yield(piece, nil) {
				return
			}
		}
	}
}
