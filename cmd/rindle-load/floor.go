package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/rindle-sh/rindle-go/producer"
)

// The floor server is the least an SSE server can do for the scenarios' clients: the same HTTP
// routes, answered by bare net/http from memory, with no authorization, database, durability,
// view or telemetry. Each delta is encoded once and its bytes written to every reader, as
// rindled does. It runs in its own process (rindle-load -floor-server), like rindled, so the
// figures measured against it are this machine's floor for the scenarios: what rindled costs
// beyond it is rindled's; what the floor itself costs, no server here can avoid.
//
// The direct-write floor (rindle-load -floor-server -floor-direct) is the same server with a
// shorter live path: an event stream's connection is hijacked once its head and catch-up are
// written, and each delta's bytes are written straight to every reader's socket from the
// append, by one writer per CPU, each taking a share of the readers: no goroutine per reader to
// wake, no chunked framing, no Flush. It has no queue for a slow reader (a write that fails drops
// the reader) and no keep-alives, so it is a floor, not a server: the cost of the write(2) calls
// themselves, which any design that keeps a socket per reader pays.

// floorStream is one stream in the floor server's memory.
type floorStream struct {
	mu    sync.Mutex
	text  []byte
	ended bool
	subs  map[chan []byte]struct{}
	conns []net.Conn // direct-write readers
	// The last catch-up encoded, shared by every join at the same offset and length (as
	// rindled shares its catch-up encodings): a herd escapes the text once.
	catchUp                 []byte
	catchUpFrom, catchUpEnd int
}

type floorServer struct {
	mu      sync.Mutex
	streams map[string]*floorStream
	direct  bool
}

// length is the stream's length, read under its lock.
func (s *floorStream) length() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.text)
}

func (f *floorServer) stream(id string) *floorStream {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.streams[id]
	if !ok {
		s = &floorStream{subs: map[chan []byte]struct{}{}}
		f.streams[id] = s
	}
	return s
}

// broadcast sends one encoded frame to every reader; a reader whose queue is full is dropped.
func (s *floorStream) broadcastLocked(b []byte, last bool) {
	s.writeDirectLocked(b, last)
	for ch := range s.subs {
		select {
		case ch <- b:
		default:
			delete(s.subs, ch)
			close(ch)
			continue
		}
		if last {
			delete(s.subs, ch)
			close(ch)
		}
	}
}

func (f *floorServer) routes() http.Handler {
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, _ *http.Request) { ok(w, map[string]any{}) })
	mux.HandleFunc("POST /v1/streams/{id}/open", func(w http.ResponseWriter, r *http.Request) {
		f.stream(r.PathValue("id"))
		ok(w, map[string]any{})
	})
	mux.HandleFunc("POST /v1/streams/{id}/append", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Text string `json:"text"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s := f.stream(r.PathValue("id"))
		s.mu.Lock()
		from := len(s.text)
		s.text = append(s.text, in.Text...)
		frame := producer.AppendSSE(nil, producer.Frame{Type: producer.FrameChunk, From: producer.Seq(from), Seq: producer.Seq(len(s.text)), Text: in.Text})
		s.broadcastLocked(frame, false)
		seq := len(s.text)
		s.mu.Unlock()
		ok(w, map[string]any{"seq": seq})
	})
	mux.HandleFunc("POST /v1/streams/{id}/flush", func(w http.ResponseWriter, r *http.Request) {
		ok(w, map[string]any{"durableSeq": f.stream(r.PathValue("id")).length()})
	})
	mux.HandleFunc("POST /v1/streams/{id}/close", func(w http.ResponseWriter, r *http.Request) {
		s := f.stream(r.PathValue("id"))
		s.mu.Lock()
		s.ended = true
		s.broadcastLocked(producer.AppendSSE(nil, producer.Frame{Type: producer.FrameEnd, Seq: producer.Seq(len(s.text)), Status: producer.StatusComplete}), true)
		s.mu.Unlock()
		ok(w, map[string]any{})
	})
	mux.HandleFunc("GET /v1/streams/{id}", func(w http.ResponseWriter, r *http.Request) {
		ok(w, map[string]any{"seq": f.stream(r.PathValue("id")).length()})
	})
	mux.HandleFunc("GET /v1/streams/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		s := f.stream(r.PathValue("id"))
		ch := make(chan []byte, 1024)
		s.mu.Lock()
		from, err := strconv.Atoi(r.URL.Query().Get("from"))
		if err != nil { // no offset: the live tail
			from = len(s.text)
		}
		from = min(max(from, 0), len(s.text))
		head := producer.AppendSSE(nil, producer.Frame{Type: producer.FrameOpen, StreamID: r.PathValue("id"), From: producer.Seq(from), Seq: producer.Seq(len(s.text))})
		var catchUp []byte
		if len(s.text) > from {
			if s.catchUp == nil || s.catchUpFrom != from || s.catchUpEnd != len(s.text) {
				s.catchUp = producer.AppendSSE(nil, producer.Frame{Type: producer.FrameChunk, From: producer.Seq(from), Seq: producer.Seq(len(s.text)), Text: string(s.text[from:])})
				s.catchUpFrom, s.catchUpEnd = from, len(s.text)
			}
			catchUp = s.catchUp
		}
		ended := s.ended
		if f.direct {
			s.hijackDirect(w, head, catchUp, ended)
			s.mu.Unlock()
			return
		}
		if !ended {
			s.subs[ch] = struct{}{}
		}
		s.mu.Unlock()
		producer.SetSSEHeaders(w.Header())
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		if _, err := w.Write(head); err != nil {
			return
		}
		if _, err := w.Write(catchUp); err != nil || rc.Flush() != nil || ended {
			return
		}
		defer func() {
			s.mu.Lock()
			if _, ok := s.subs[ch]; ok {
				delete(s.subs, ch)
				close(ch)
			}
			s.mu.Unlock()
		}()
		for {
			select {
			case b, ok := <-ch:
				if !ok {
					return
				}
				if _, err := w.Write(b); err != nil || rc.Flush() != nil {
					return
				}
			case <-r.Context().Done():
				return
			}
		}
	})
	return mux
}

// writeDirectLocked writes b to every direct reader's socket, the readers shared out among one
// writer per CPU; a reader whose write fails is dropped. last closes every socket after it.
func (s *floorStream) writeDirectLocked(b []byte, last bool) {
	if len(s.conns) == 0 {
		return
	}
	parts := min(runtime.GOMAXPROCS(0), len(s.conns))
	failed := make([][]int, parts)
	var wg sync.WaitGroup
	for p := range parts {
		wg.Go(func() {
			for i := p; i < len(s.conns); i += parts {
				c := s.conns[i]
				if _, err := c.Write(b); err != nil || last {
					c.Close()
					failed[p] = append(failed[p], i)
				}
			}
		})
	}
	wg.Wait()
	gone := map[int]bool{}
	for _, f := range failed {
		for _, i := range f {
			gone[i] = true
		}
	}
	if len(gone) > 0 {
		kept := s.conns[:0]
		for i, c := range s.conns {
			if !gone[i] {
				kept = append(kept, c)
			}
		}
		s.conns = kept
	}
}

// directHead is the direct-write floor's response head: the body runs until the connection
// closes, so it needs no chunked framing.
const directHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\nConnection: close\r\n\r\n"

// hijackDirect takes over a direct reader's connection and writes the response head, the open
// frame and the catch-up in one write. It holds s.mu, so no delta can slip in between.
func (s *floorStream) hijackDirect(w http.ResponseWriter, head, catchUp []byte, ended bool) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	out := append(append([]byte(directHead), head...), catchUp...)
	if _, err := conn.Write(out); err != nil || ended {
		conn.Close()
		return
	}
	s.conns = append(s.conns, conn)
}

// serveFloor runs the floor server until SIGTERM, announcing its address as rindled does; direct
// makes it the direct-write floor.
func serveFloor(direct bool) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: (&floorServer{streams: map[string]*floorStream{}, direct: direct}).routes(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("floor server listening url=http://%s\n", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		return err
	}
	return nil
}

// startFloor runs this binary as the floor server in its own process (the direct-write floor
// with direct).
func startFloor(ctx context.Context, direct bool) (*server, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.CommandContext(ctx, self, "-floor-server", fmt.Sprintf("-floor-direct=%t", direct))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if m := listening.FindStringSubmatch(sc.Text()); m != nil {
			go func() {
				for sc.Scan() { // drain
				}
			}()
			return &server{base: m[1], pid: cmd.Process.Pid, floor: true, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}, stop, nil
		}
	}
	stop()
	return nil, nil, fmt.Errorf("the floor server never listened")
}
