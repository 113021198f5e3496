package producer_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rindle-sh/rindle-go/producer"
)

// benchPlane is a plane whose checkpoints never fire during the benchmark (a huge threshold and
// a manual clock that never moves), so the figures are the live plane's alone.
func benchPlane(b *testing.B, queue int) (*producer.Plane, *producer.LiveStream) {
	b.Helper()
	store := newMemStore()
	plane, err := producer.New(producer.Config{
		Committer:       producer.CommitFunc(store.commit),
		Authorize:       allow,
		CheckpointChars: 1 << 40,
		RetainChars:     1 << 40,
		MaxQueuedFrames: queue,
		Clock:           newStoppedClock(),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(plane.Close)
	s, err := plane.Open(context.Background(), producer.OpenStreamInput{StreamID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	return plane, s
}

// stoppedClock never fires: cadence is out of the picture.
type stoppedClock struct{}

func newStoppedClock() stoppedClock { return stoppedClock{} }

func (stoppedClock) Now() time.Time { return time.Unix(0, 0) }

func (stoppedClock) AfterFunc(time.Duration, func()) producer.Timer { return stoppedTimer{} }

type stoppedTimer struct{}

func (stoppedTimer) Stop() bool { return true }

// BenchmarkPush is a 4-character delta pushed with no readers attached.
func BenchmarkPush(b *testing.B) {
	_, s := benchPlane(b, 1)
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Push("tok "); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/push")
}

// BenchmarkFanout pushes a 4-character delta to K attached readers, each of which takes its
// frame. ns/frame and allocs/op (per push) are the figures; allocations must not grow with K.
func BenchmarkFanout(b *testing.B) {
	for _, k := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("K=%d", k), func(b *testing.B) {
			plane, s := benchPlane(b, 1<<20)
			ctx := context.Background()
			subs := benchReaders(b, plane, k)
			b.ReportAllocs()
			for b.Loop() {
				if err := s.Push("tok "); err != nil {
					b.Fatal(err)
				}
				for _, sub := range subs {
					f, err := sub.Next(ctx)
					if err != nil || f.Type != producer.FrameChunk {
						b.Fatalf("frame %v, err %v", f.Type, err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*k), "ns/frame")
		})
	}
}

// benchReaders attaches k readers to the bench stream, each past its open frame.
func benchReaders(b *testing.B, plane *producer.Plane, k int) []*producer.Subscription {
	b.Helper()
	ctx := context.Background()
	subs := make([]*producer.Subscription, k)
	for i := range subs {
		sub, err := plane.Subscribe(ctx, producer.SubscribeInput{StreamID: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := sub.Next(ctx); err != nil { // the open frame
			b.Fatal(err)
		}
		subs[i] = sub
	}
	return subs
}

// BenchmarkFanoutWake is BenchmarkFanout with each of K readers in a goroutine of its own,
// parked in Next until the push wakes it, as an HTTP reader is: every push waits until all K
// have their frame. ns/frame (per reader-frame) includes the wake-up and the scheduler's hand-off
// that BenchmarkFanout, pulling every queue from the pushing goroutine, leaves out. B/op is per
// push: the frame and its shared encoding, from the stream's arena, whatever K.
func BenchmarkFanoutWake(b *testing.B) {
	for _, k := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("K=%d", k), func(b *testing.B) {
			plane, s := benchPlane(b, 1<<20)
			ctx := context.Background()
			var got sync.WaitGroup
			var readers sync.WaitGroup
			var bad atomic.Int64
			subs := benchReaders(b, plane, k)
			for _, sub := range subs {
				readers.Go(func() {
					for {
						f, err := sub.Next(ctx)
						if err != nil {
							return // closed below
						}
						if f.Type != producer.FrameChunk {
							bad.Add(1)
						}
						got.Done()
					}
				})
			}
			pushAndWait(b, s, &got, k, k)
			for _, sub := range subs {
				sub.Close()
			}
			readers.Wait()
			if n := bad.Load(); n > 0 {
				b.Fatalf("%d frames were not chunks", n)
			}
		})
	}
}

// BenchmarkEncodeSSE is the per-frame cost of the SSE wire encoding.
func BenchmarkEncodeSSE(b *testing.B) {
	f := producer.Frame{Type: producer.FrameChunk, From: 1000, Seq: 1004, Text: "tok😀"}
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf = producer.AppendSSE(buf[:0], f)
		if len(buf) == 0 {
			b.Fatal("empty")
		}
	}
}

// BenchmarkFanoutSSE is the fan-out with each of K readers turning its frame into SSE bytes, as
// WriteSSE does: "PerReader" escapes the frame once per reader (before the live plane shared
// its encoding), "Shared" copies the bytes the plane encoded once. ns/frame is per reader-frame.
func BenchmarkFanoutSSE(b *testing.B) {
	delta := "tok😀 \"q\" "
	for _, k := range []int{1, 100, 1000} {
		for _, mode := range []string{"PerReader", "Shared"} {
			b.Run(fmt.Sprintf("K=%d/%s", k, mode), func(b *testing.B) {
				plane, s := benchPlane(b, 1<<20)
				subs := make([]*producer.Subscription, k)
				bufs := make([][]byte, k)
				ctx := context.Background()
				for i := range subs {
					sub, err := plane.Subscribe(ctx, producer.SubscribeInput{StreamID: "bench"})
					if err != nil {
						b.Fatal(err)
					}
					if _, err := sub.Next(ctx); err != nil {
						b.Fatal(err)
					}
					subs[i], bufs[i] = sub, make([]byte, 0, 256)
				}
				b.ReportAllocs()
				for b.Loop() {
					if err := s.Push(delta); err != nil {
						b.Fatal(err)
					}
					for i, sub := range subs {
						f, enc, err := sub.NextEncoded(ctx)
						if err != nil || f.Type != producer.FrameChunk {
							b.Fatalf("frame %v, err %v", f.Type, err)
						}
						if mode == "Shared" && enc != nil {
							bufs[i] = append(bufs[i][:0], enc...)
						} else {
							bufs[i] = producer.AppendSSE(bufs[i][:0], f)
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*k), "ns/frame")
			})
		}
	}
}

// BenchmarkJoinOffsets is the offset work of a join near the end of a long durable text: its
// length, the floor of the reader's offset, and the slice from there. "Scan" walks the string
// (what joins did), "Indexed" asks the view's TextView.
func BenchmarkJoinOffsets(b *testing.B) {
	for _, size := range []int{16 << 10, 256 << 10, 4 << 20} {
		text := strings.Repeat("x日😀 ", size/8)
		view := producer.NewText(text).View()
		n := view.Len()
		from := n - 12
		b.Run(fmt.Sprintf("chars=%d/Scan", size), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				end := producer.Len16(text)
				floor := producer.Len16(producer.Slice16(text, 0, from))
				if s := producer.Slice16(text, floor, end); s == "" {
					b.Fatal("empty")
				}
			}
		})
		b.Run(fmt.Sprintf("chars=%d/Indexed", size), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				end := view.Len()
				floor := view.Floor(from)
				if s := view.Slice(floor, end); s == "" {
					b.Fatal("empty")
				}
			}
		})
	}
}

// pushAndWait is the wake-up benchmarks' loop: one delta per iteration, then a wait for got,
// which the readers' side marks done waits times per push. It reports allocations and ns/frame,
// per reader-frame of k readers.
func pushAndWait(b *testing.B, s *producer.LiveStream, got *sync.WaitGroup, waits, k int) {
	b.Helper()
	b.ReportAllocs()
	for b.Loop() {
		got.Add(waits)
		if err := s.Push("tok "); err != nil {
			b.Fatal(err)
		}
		got.Wait()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*k), "ns/frame")
}
