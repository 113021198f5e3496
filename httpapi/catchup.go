package httpapi

import (
	"sync"

	"github.com/rindle-sh/rindle-go/producer"
)

// queued is a frame a join hands on, with its SSE encoding when one is shared (nil otherwise).
type queued struct {
	f   producer.Frame
	enc []byte
}

// catchUpMinText is the text length from which a catch-up chunk's encoding is shared: below it,
// escaping is cheaper than the lookup.
const catchUpMinText = 4 << 10

// catchUpEntries bounds the shared encodings kept (each at most one durable text's size).
const catchUpEntries = 64

// catchUps shares the SSE encoding of the view's catch-up chunks between readers: a herd of
// readers joining one long answer at the same offset (a page shared in a chat, a reconnect
// storm after a deploy) all get the same frame, which is JSON-escaped once instead of once
// per reader. The durable text of a range never changes (contract P), and an entry is reused
// only for the very same text, so a message deleted and re-created under its id is safe.
var catchUps = &encodingCache{m: map[catchUpKey]*encoding{}} //nolint:gochecknoglobals // a process-wide cache of immutable encodings

type catchUpKey struct {
	id       string
	from, to producer.Seq
}

type encoding struct {
	text string
	once sync.Once
	enc  []byte
}

type encodingCache struct {
	mu    sync.Mutex
	m     map[catchUpKey]*encoding
	order []catchUpKey // insertion order, for eviction
}

// catchUp queues a catch-up chunk of stream id with its shared encoding.
func catchUp(id string, f producer.Frame) queued {
	if len(f.Text) < catchUpMinText {
		return queued{f: f}
	}
	return queued{f: f, enc: catchUps.get(catchUpKey{id, f.From, f.Seq}, f)}
}

func (c *encodingCache) get(k catchUpKey, f producer.Frame) []byte {
	c.mu.Lock()
	e := c.m[k]
	if e == nil || e.text != f.Text { // the same text is almost always the same pointer: O(1)
		e = &encoding{text: f.Text}
		if _, had := c.m[k]; !had {
			c.order = append(c.order, k)
		}
		c.m[k] = e
		for len(c.order) > catchUpEntries {
			delete(c.m, c.order[0])
			c.order = c.order[1:]
		}
	}
	c.mu.Unlock()
	e.once.Do(func() { e.enc = producer.AppendSSE(nil, f) })
	return e.enc
}
