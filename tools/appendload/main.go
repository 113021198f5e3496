// Command appendload measures acknowledged Durable Streams appends per second over HTTP: W
// goroutines, each creating a stream of its own (text unless -type names a binary type) and
// appending to it with one request in flight, for a number of seconds. It prints one line, "N appends/s (client CPU C µs per
// append)", C being this process's own user and system time. With -producer each writer appends
// as an idempotent producer (Producer-Id, Producer-Epoch, Producer-Seq), as the published
// client's IdempotentProducer does. It is the client of the README's
// "group commit on ÷ off" row (run.sh starts a fresh rindled per repetition) and of the
// comparison with the reference server (vs-reference.sh).
//
//	go run ./tools/appendload -base http://127.0.0.1:8080 -token TOKEN -w 8 -s 5
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	base := flag.String("base", "", "rindled's base URL")
	token := flag.String("token", "", "a bearer token with the producer scope")
	writers := flag.Int("w", 8, "writers, one stream each")
	secs := flag.Int("s", 5, "seconds")
	contentType := flag.String("type", "text/plain", "the streams' content type: a text or JSON type makes text streams, any other a byte stream")
	producer := flag.Bool("producer", false, "append as an idempotent producer, one per writer")
	flag.Parse()
	if err := run(*base, *token, *contentType, *writers, time.Duration(*secs)*time.Second, *producer); err != nil {
		fmt.Fprintln(os.Stderr, "appendload:", err)
		os.Exit(1)
	}
}

func run(base, token, contentType string, writers int, d time.Duration, producer bool) error {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: writers}}
	do := func(method, path, body string, want int, headers ...string) error {
		req, err := http.NewRequest(method, base+"/v1/stream/"+path, strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", contentType)
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		msg, _ := io.ReadAll(res.Body)
		if res.StatusCode != want {
			return fmt.Errorf("%s %s: %d %s", method, path, res.StatusCode, msg)
		}
		return nil
	}
	tag := time.Now().UnixNano()
	var acked atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	for i := range writers {
		wg.Go(func() {
			path := fmt.Sprintf("load-%d-w%d", tag, i)
			err := do(http.MethodPut, path, "", http.StatusCreated)
			want, seq := http.StatusNoContent, 0
			if producer {
				want = http.StatusOK // an idempotent producer's new data
			}
			for err == nil && time.Now().Before(deadline) {
				var headers []string
				if producer {
					headers = []string{"Producer-Id", fmt.Sprintf("w%d", i), "Producer-Epoch", "0", "Producer-Seq", strconv.Itoa(seq)}
				}
				if err = do(http.MethodPost, path, "delta é😀 ", want, headers...); err == nil {
					acked.Add(1)
					seq++
				}
			}
			if err != nil {
				once.Do(func() { first = err })
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	n := acked.Load()
	fmt.Printf("%.0f appends/s (client CPU %.0f µs per append)\n", float64(n)/d.Seconds(), ownCPU().Seconds()*1e6/float64(max(n, 1)))
	return nil
}

// ownCPU is this process's user and system time so far.
func ownCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
