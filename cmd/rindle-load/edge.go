package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/rindle-sh/rindle-go/auth"
	"github.com/rindle-sh/rindle-go/internal/edgetest"
)

// edge is the readers-behind-a-cache scenario (README, "Readers behind a cache"): nginx
// (deploy/nginx-edge.conf.tmpl) and `rindled edge-auth` in front of rindled, -edge-readers
// long-poll readers of one Durable Streams stream, each with its own token and connection, and a
// producer appending -edge-appends numbered appends, one every -edge-every. It reports the
// origin's long-poll requests per append (from nginx's logs), the delivery time from each
// append's acknowledgement to each reader holding it, and how many readers read other than
// exactly the appended text (0, or the run fails).
func edge(ctx context.Context, s *server, c config, id string, record func(string, float64)) error {
	if s.floor {
		return nil // the floors speak the event API only
	}
	dir := filepath.Join(s.work, "edge-"+id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	authURL, stopAuth, err := startEdgeAuth(ctx, s)
	if err != nil {
		return err
	}
	defer stopAuth()
	e, err := edgetest.Start(edgetest.Config{Dir: dir, Origin: strings.TrimPrefix(s.base, "http://"), EdgeAuth: strings.TrimPrefix(authURL, "http://")})
	if err != nil {
		return err
	}
	defer e.Close()
	secret, err := os.ReadFile(filepath.Join(s.data, "jwt-secret"))
	if err != nil {
		return err
	}
	sign := func(scope string, n int) (string, error) {
		return auth.Sign(secret, auth.TokenClaims{Scope: scope, RegisteredClaims: jwt.RegisteredClaims{Subject: "load", ID: strconv.Itoa(n)}}, time.Hour)
	}
	producerTok, err := sign("producer", 0)
	if err != nil {
		return err
	}
	url := e.URL + "/v1/stream/edge/" + id
	pclient := &http.Client{}
	send := func(method, body string) error {
		req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+producerTok)
		req.Header.Set("Content-Type", "text/plain")
		resp, err := pclient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode >= 300 {
			b, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, b)
		}
		return nil
	}
	if err := send(http.MethodPut, ""); err != nil {
		return err
	}

	// Appends are "<NNNNN>" (7 bytes): a reader finds each append's number in what it reads.
	const width = 7
	appends := c.edgeAppends
	acked := make([]atomic.Int64, appends) // each append's acknowledgement, unix ns
	transport := &http.Transport{MaxIdleConnsPerHost: c.edgeReaders + 16, MaxConnsPerHost: 0, IdleConnTimeout: time.Minute}
	client := &http.Client{Transport: transport}
	defer transport.CloseIdleConnections()
	var joined, done sync.WaitGroup
	var mu sync.Mutex
	var delays []time.Duration
	var wrong, failed atomic.Int64
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for n := range c.edgeReaders {
		tok, err := sign("", n+1)
		if err != nil {
			return err
		}
		joined.Add(1)
		done.Go(func() {
			var mine []time.Duration
			var once sync.Once
			join := func() { once.Do(joined.Done) } // its first long-poll is on its way
			defer join()                            // or it failed before
			got, err := edgetest.Reader{Client: client, URL: url, Token: tok, Want: appends * width, Joined: join,
				Data: func(from int, b []byte, at time.Time) {
					for k := from / width; k < (from+len(b))/width; k++ {
						if ack := acked[k].Load(); ack > 0 {
							mine = append(mine, at.Sub(time.Unix(0, ack)))
						}
					}
				}}.Read(rctx)
			if err != nil {
				failed.Add(1)
				return
			}
			if got != edgeText(appends) {
				wrong.Add(1)
			}
			mu.Lock()
			delays = append(delays, mine...)
			mu.Unlock()
		})
	}
	joined.Wait()
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("%d readers failed to join through the edge", n)
	}
	before, err := e.Requests()
	if err != nil {
		return err
	}
	originBefore, err := e.OriginRequests()
	if err != nil {
		return err
	}
	tick := time.NewTicker(c.edgeEvery)
	for k := range appends {
		<-tick.C
		if err := send(http.MethodPost, fmt.Sprintf("<%05d>", k)); err != nil {
			tick.Stop()
			return err
		}
		acked[k].Store(time.Now().UnixNano())
	}
	tick.Stop()
	finished := make(chan struct{})
	go func() { done.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(2 * time.Minute):
		cancel()
		<-finished
		return errors.New("the readers did not all read every append within 2 minutes")
	}
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("%d readers failed", n)
	}
	reqs, err := e.Requests()
	if err != nil {
		return err
	}
	originReqs, err := e.OriginRequests()
	if err != nil {
		return err
	}
	var polls, atOrigin, refused int
	for _, r := range reqs[len(before):] {
		if r.Status >= 300 {
			refused++
		}
		if strings.Contains(r.URI, "live=long-poll") {
			polls++
		}
	}
	origin := len(originReqs) - len(originBefore)
	for _, u := range originReqs[len(originBefore):] {
		if strings.Contains(u, "live=long-poll") {
			atOrigin++
		}
	}
	if refused > 0 {
		return fmt.Errorf("the edge answered %d requests with an error status: see %s", refused, dir)
	}
	slices.Sort(delays)
	record("edge: origin long-polls per append", float64(atOrigin)/float64(appends))
	record("edge: origin requests per append (appends included)", float64(origin)/float64(appends))
	record("edge: long-polls per append (all readers)", float64(polls)/float64(appends))
	record("edge: delivery p50 (ms)", pct(delays, 0.50))
	record("edge: delivery p99 (ms)", pct(delays, 0.99))
	record("edge: readers with wrong text", float64(wrong.Load()))
	if wrong.Load() > 0 {
		return fmt.Errorf("%d readers read other than the appended text", wrong.Load())
	}
	return nil
}

func edgeText(n int) string {
	var b strings.Builder
	for k := range n {
		fmt.Fprintf(&b, "<%05d>", k)
	}
	return b.String()
}

// startEdgeAuth runs `rindled edge-auth` with s's development secret.
func startEdgeAuth(ctx context.Context, s *server) (string, func(), error) {
	cmd := exec.CommandContext(ctx, s.bin, "edge-auth", "-addr", "127.0.0.1:0", "-data", s.data)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		if m := listening.FindStringSubmatch(lines.Text()); m != nil {
			go func() { _, _ = io.Copy(io.Discard, out) }()
			return m[1], stop, nil
		}
	}
	stop()
	return "", nil, errors.New("rindled edge-auth never said where it listens")
}
