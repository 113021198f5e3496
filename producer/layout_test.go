package producer

import (
	"testing"
	"unsafe"
)

// TestSubscriberHotLine holds the subscriber to the layout BenchmarkFanoutDirect depends on:
// what the producer and a DirectWriter's writer both write for each frame lies in the first 64
// bytes, and the struct fills the allocator's 128-byte size class, whose objects start on a
// 128-byte boundary, so those 64 bytes are one cache line.
func TestSubscriberHotLine(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the layout is laid out for 64-bit platforms")
	}
	var s subscriber
	hot := map[string]uintptr{
		"mu":        unsafe.Offsetof(s.mu) + unsafe.Sizeof(s.mu),
		"one":       unsafe.Offsetof(s.one) + unsafe.Sizeof(s.one),
		"queue":     unsafe.Offsetof(s.queue) + unsafe.Sizeof(s.queue),
		"nextDirty": unsafe.Offsetof(s.nextDirty) + unsafe.Sizeof(s.nextDirty),
		"head":      unsafe.Offsetof(s.head) + unsafe.Sizeof(s.head),
		"done":      unsafe.Offsetof(s.done) + 1,
		"closed":    unsafe.Offsetof(s.closed) + 1,
		"owner":     unsafe.Offsetof(s.owner) + 1,
		"pending":   unsafe.Offsetof(s.pending) + 1,
		"finished":  unsafe.Offsetof(s.finished) + 1,
	}
	for name, end := range hot {
		if end > 64 {
			t.Errorf("subscriber.%s ends at byte %d, past the first cache line", name, end)
		}
	}
	if off := unsafe.Offsetof(s.cap); off != 64 {
		t.Errorf("the read-mostly fields start at byte %d, not 64", off)
	}
	if size := unsafe.Sizeof(s); size != 128 {
		t.Errorf("subscriber is %d bytes, not 128", size)
	}
}
