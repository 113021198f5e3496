package ivm

import (
	"container/list"
	"fmt"
	"testing"
	"time"

	"github.com/rindle-sh/rindle-go/cdc"
	"github.com/rindle-sh/rindle-go/producer"
)

// benchView is a View with no subscriber or database: only what apply touches.
func benchView() *View {
	return &View{entries: map[string]*entry{}, settled: list.New(),
		cfg: Config{MaxEntries: 1 << 30, MaxBytes: 1 << 62}}
}

// grow applies n one-chunk appends to stream id, as a Durable Streams text stream's appends
// arrive (a chunk and the row's new seq, status pending: open, so the entry is settled).
func grow(v *View, id string, n int, xid *uint32) {
	at := producer.Seq(0)
	if e := v.entries[id]; e != nil {
		at = e.rowSeq
	}
	for range n {
		*xid++
		at += 8
		v.apply(&cdc.Tx{Xid: *xid, EndLSN: 0, CommitTime: time.Now(), Events: []cdc.Event{
			{Kind: cdc.ChunkAppended, StreamID: id, Seq: at, Text: "8 units."},
			{Kind: cdc.MessageChanged, StreamID: id, Seq: at, Status: "pending"},
		}})
	}
}

func created(v *View, id string, xid *uint32) {
	*xid++
	v.apply(&cdc.Tx{Xid: *xid, Events: []cdc.Event{{Kind: cdc.MessageChanged, StreamID: id, Status: "pending", Created: true}}})
}

// BenchmarkApplyAppend is one append applied to a stream that already holds chunks appends: the
// cost of a view event must not grow with the stream (a text stream of a million appends is one
// user's; every stream's events wait behind each of its events).
func BenchmarkApplyAppend(b *testing.B) {
	for _, chunks := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("chunks=%d", chunks), func(b *testing.B) {
			v, xid := benchView(), uint32(0)
			created(v, "s", &xid)
			grow(v, "s", chunks, &xid)
			for b.Loop() {
				grow(v, "s", 1, &xid)
			}
		})
	}
}

// BenchmarkApplyDelete is the transaction that deletes a stream of chunks appends (the row, then
// the trigger's chunk deletes), per chunk.
func BenchmarkApplyDelete(b *testing.B) {
	for _, chunks := range []int{1_000, 20_000} {
		b.Run(fmt.Sprintf("chunks=%d", chunks), func(b *testing.B) {
			xid := uint32(0)
			for b.Loop() {
				b.StopTimer()
				v := benchView()
				created(v, "s", &xid)
				grow(v, "s", chunks, &xid)
				evs := []cdc.Event{{Kind: cdc.MessageDeleted, StreamID: "s"}}
				for i := range chunks {
					evs = append(evs, cdc.Event{Kind: cdc.ChunkDeleted, StreamID: "s", Seq: producer.Seq(8 * (i + 1))})
				}
				xid++
				tx := &cdc.Tx{Xid: xid, Events: evs}
				b.StartTimer()
				v.apply(tx)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(chunks), "ns/chunk")
		})
	}
}

// BenchmarkApplyWideTx is one transaction touching streams different streams, one append each
// (a group commit's, or a batch of the reaper's), per event.
func BenchmarkApplyWideTx(b *testing.B) {
	for _, streams := range []int{16, 4_096} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			v, xid := benchView(), uint32(0)
			for i := range streams {
				created(v, fmt.Sprint(i), &xid)
			}
			at := producer.Seq(0)
			for b.Loop() {
				at += 8
				evs := make([]cdc.Event, 0, 2*streams)
				for i := range streams {
					id := fmt.Sprint(i)
					evs = append(evs, cdc.Event{Kind: cdc.ChunkAppended, StreamID: id, Seq: at, Text: "8 units."},
						cdc.Event{Kind: cdc.MessageChanged, StreamID: id, Seq: at, Status: "pending"})
				}
				xid++
				v.apply(&cdc.Tx{Xid: xid, Events: evs})
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(2*streams), "ns/event")
		})
	}
}
