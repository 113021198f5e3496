// Package edgetest runs nginx (Debian's nginx-light: the proxy cache and auth_request) on
// loopback as the HTTP cache of deploy/nginx-edge.conf.tmpl, in front of a rindled and a
// `rindled edge-auth`: the edge of the tests and of rindle-load. It owns nginx's lifetime and
// reading its access log, not the servers behind it.
package edgetest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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
