// Package edgetest runs nginx (Debian's nginx-light: the proxy cache and auth_request) on
// loopback as the HTTP cache of deploy/nginx-edge.conf.tmpl, in front of a rindled and a
// `rindled edge-auth`: the edge of the tests and of rindle-load. It owns nginx's lifetime,
// reading its logs, and a protocol long-poll reader through it (Reader); not the servers behind it.
package edgetest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"text/template"
	"time"
)

// Config names what nginx fronts.
type Config struct {
	// Dir holds nginx's configuration, cache, logs and pid file.
	Dir string
	// Origin is rindled's host:port; EdgeAuth is `rindled edge-auth`'s.
	Origin, EdgeAuth string
	// Template is deploy/nginx-edge.conf.tmpl's path. Empty: found from this source file.
	Template string
}

// Edge is a running nginx.
type Edge struct {
	// URL is where clients reach it: http://127.0.0.1:PORT.
	URL string
	dir string
	cmd *exec.Cmd
	// exited is closed once nginx has exited, with waitErr its status.
	exited  chan struct{}
	waitErr error
}

// ErrNoNginx is returned when nginx is not installed.
var ErrNoNginx = errors.New("edgetest: nginx is not installed (apt-get install -y nginx-light)")

// Binary finds nginx on PATH or in /usr/sbin.
func Binary() (string, error) {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx", nil
	}
	return "", ErrNoNginx
}

// Start renders the configuration on a free loopback port and starts nginx in the foreground,
// returning once it accepts connections.
func Start(cfg Config) (*Edge, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	if cfg.Template == "" {
		_, self, _, _ := runtime.Caller(0)
		cfg.Template = filepath.Join(filepath.Dir(self), "..", "..", "deploy", "nginx-edge.conf.tmpl")
	}
	tmpl, err := template.ParseFiles(cfg.Template)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	listen := ln.Addr().String()
	_ = ln.Close()
	var conf bytes.Buffer
	if err := tmpl.Execute(&conf, map[string]any{"Dir": cfg.Dir, "Origin": cfg.Origin, "EdgeAuth": cfg.EdgeAuth,
		"Listen": listen, "Root": os.Geteuid() == 0}); err != nil {
		return nil, err
	}
	path := filepath.Join(cfg.Dir, "nginx.conf")
	if err := os.WriteFile(path, conf.Bytes(), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-p", cfg.Dir, "-c", path, "-e", filepath.Join(cfg.Dir, "error.log"), "-g", "daemon off;")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	e := &Edge{URL: "http://" + listen, dir: cfg.Dir, cmd: cmd, exited: make(chan struct{})}
	go func() {
		e.waitErr = cmd.Wait()
		close(e.exited)
	}()
	for deadline := time.Now().Add(30 * time.Second); ; {
		select {
		case <-e.exited:
			return nil, fmt.Errorf("edgetest: nginx exited: %w: %s %s", e.waitErr, out.String(), e.errorLog())
		default:
		}
		if resp, err := http.Get(e.URL + "/healthz-edge-probe"); err == nil {
			resp.Body.Close()
			return e, nil
		}
		if time.Now().After(deadline) {
			e.Close() // out is read once nginx has exited
			return nil, fmt.Errorf("edgetest: nginx did not accept connections: %s %s", out.String(), e.errorLog())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *Edge) errorLog() string {
	b, _ := os.ReadFile(filepath.Join(e.dir, "error.log"))
	return string(b)
}

// Close stops nginx (SIGQUIT, its graceful stop; SIGKILL after 10 s) and waits for it.
// Idempotent.
func (e *Edge) Close() {
	if e.cmd.Process == nil {
		return
	}
	_ = e.cmd.Process.Signal(os.Interrupt)
	select {
	case <-e.exited: // its exit status after a signal says nothing more
	case <-time.After(10 * time.Second):
		_ = e.cmd.Process.Kill()
		<-e.exited
	}
	e.cmd.Process = nil
}

// Request is one line of the access log: a request a client made.
type Request struct {
	// Cache is $upstream_cache_status: HIT (the cache answered), MISS, BYPASS, EXPIRED, …, or
	// "-" when the request was not the cache's (refused at the edge, or not a stream read).
	Cache string
	// Status is the status the client got.
	Status int
	// URI is the request's URI.
	URI string
}

// Requests reads the access log: every request clients made so far.
func (e *Edge) Requests() ([]Request, error) {
	var all []Request
	err := e.lines("access.log", func(line string) error {
		var r Request
		if _, err := fmt.Sscanf(line, "%s %d %q", &r.Cache, &r.Status, &r.URI); err != nil {
			return err
		}
		all = append(all, r)
		return nil
	})
	return all, err
}

// OriginRequests reads the URIs of the requests rindled got from the edge so far (the
// configuration's origin.log: what the first tier sent straight to it, and what the second
// tier did not answer from its cache).
func (e *Edge) OriginRequests() ([]string, error) {
	var all []string
	err := e.lines("origin.log", func(line string) error {
		var uri string
		if _, err := fmt.Sscanf(line, "%q", &uri); err != nil {
			return err
		}
		all = append(all, uri)
		return nil
	})
	return all, err
}

func (e *Edge) lines(name string, each func(string) error) error {
	f, err := os.Open(filepath.Join(e.dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil // nothing logged yet
	}
	if err != nil {
		return err
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	lines.Buffer(make([]byte, 64<<10), 1<<20)
	for lines.Scan() {
		if err := each(lines.Text()); err != nil {
			return fmt.Errorf("edgetest: %s line %q: %w", name, lines.Text(), err)
		}
	}
	return lines.Err()
}

// Reader reads a Durable Streams stream through the edge as a protocol client does: a catch-up
// read from the start, then long-polls at each Stream-Next-Offset, echoing the cursor, until it
// holds Want bytes.
type Reader struct {
	Client *http.Client
	// URL is the stream's; Token the bearer token sent with every read.
	URL, Token string
	Want       int
	// Joined, if set, runs once the catch-up read is done, before the first long-poll.
	Joined func()
	// Data, if set, runs for each 200's body: from is the length read before it, at when it came.
	Data func(from int, b []byte, at time.Time)
}

// Read reads until Want bytes are in hand, and returns them (what it read, on an error: a
// status other than 200 or 204, or an answer without Stream-Next-Offset).
func (rd Reader) Read(ctx context.Context) (string, error) {
	var got strings.Builder
	offset, cursor := "-1", ""
	for got.Len() < rd.Want {
		q := "?offset=" + offset
		if offset != "-1" {
			q += "&live=long-poll"
			if cursor != "" {
				q += "&cursor=" + cursor
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, rd.URL+q, nil)
		if err != nil {
			return got.String(), err
		}
		req.Header.Set("Authorization", "Bearer "+rd.Token)
		resp, err := rd.Client.Do(req)
		if err != nil {
			return got.String(), err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		at := time.Now()
		if err != nil {
			return got.String(), err
		}
		switch resp.StatusCode {
		case http.StatusOK:
			if rd.Data != nil {
				rd.Data(got.Len(), b, at)
			}
			got.Write(b)
		case http.StatusNoContent:
		default:
			return got.String(), fmt.Errorf("GET %s: %d %s", q, resp.StatusCode, b)
		}
		next := resp.Header.Get("Stream-Next-Offset")
		if next == "" {
			return got.String(), fmt.Errorf("GET %s: no Stream-Next-Offset", q)
		}
		if offset == "-1" && rd.Joined != nil {
			rd.Joined()
		}
		offset, cursor = next, resp.Header.Get("Stream-Cursor")
	}
	return got.String(), nil
}
