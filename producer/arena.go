package producer

// frameArena hands out a stream's live frames, each with its SSE encoding, from small slabs. A
// live frame is queued by pointer in every reader's queue, so a push costs one frame and one
// encoding whatever the number of readers, and the slabs make even those an allocation per few
// dozen pushes rather than several per push. A slab is never written again where it was handed
// out, so readers share the bytes without a lock; it is freed by the collector once no reader
// holds a frame from it.
//
// A frameArena belongs to one LiveStream and is used under its mutex.
type frameArena struct {
	frames []queued
	bytes  []byte
}

const (
	arenaFrames = 32      // frames per slab
	arenaBytes  = 4 << 10 // encoding bytes per slab
)

// encode returns f with its SSE encoding, both shared: never modify them.
func (a *frameArena) encode(f Frame) *queued {
	if len(a.frames) == cap(a.frames) {
		a.frames = make([]queued, 0, arenaFrames)
	}
	a.frames = a.frames[:len(a.frames)+1]
	q := &a.frames[len(a.frames)-1]
	q.f = f

	strs := stringBytes(f)
	need := sseFixed + 6*strs
	if need > arenaBytes/4 {
		// A large frame gets its own buffer, sized for the usual case of nothing to escape: a
		// slab of mostly one frame is no saving, and a reader holding a small frame would pin it.
		q.sse = AppendSSE(make([]byte, 0, sseFixed+strs), f)
		return q
	}
	if cap(a.bytes)-len(a.bytes) < need {
		a.bytes = make([]byte, 0, arenaBytes)
	}
	start := len(a.bytes)
	a.bytes = AppendSSE(a.bytes, f)
	// The full slice expression caps the frame at its own bytes: an append to it by a reader
	// would copy, never overwrite the next frame.
	q.sse = a.bytes[start:len(a.bytes):len(a.bytes)]
	return q
}

// sseFixed bounds AppendSSE's bytes besides the frame's strings: the id and data prefixes, the
// field names and up to five 20-digit numbers.
const sseFixed = 256

// sseBound is an upper bound of len(AppendSSE(nil, f)): JSON escaping writes at most six bytes
// for one byte of a string (a control byte as \u00XX).
func sseBound(f Frame) int { return sseFixed + 6*stringBytes(f) }

// stringBytes is the length of f's strings, which AppendSSE escapes.
func stringBytes(f Frame) int {
	return len(f.Type) + len(f.StreamID) + len(f.Text) + len(f.Status) + len(f.Error)
}
