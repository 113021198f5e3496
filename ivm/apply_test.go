package ivm

import (
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rindle-sh/rindle-go/cdc"
	"github.com/rindle-sh/rindle-go/producer"
)

// An entry's chunks after random transactions of appends (new, redelivered, out of order) and
// deletes (including a delete and a later append of the same seq in one transaction) are the
// model's: a map from seq to text, changed event by event in commit order. chunkBytes, which
// size reads instead of walking the chunks, is always their text's length.
func TestApplyChunksFollowsCommitOrder(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		v, xid := benchView(), uint32(0)
		created(v, "s", &xid)
		model := map[producer.Seq]string{}
		texts := []string{"a", "bc", "😀", "été", ""}
		for range 30 {
			var evs []cdc.Event
			for range 1 + rng.IntN(8) {
				seq := producer.Seq(1 + rng.IntN(12))
				if rng.IntN(3) == 0 {
					evs = append(evs, cdc.Event{Kind: cdc.ChunkDeleted, StreamID: "s", Seq: seq})
					delete(model, seq)
					continue
				}
				text := texts[rng.IntN(len(texts))]
				evs = append(evs, cdc.Event{Kind: cdc.ChunkAppended, StreamID: "s", Seq: seq, Text: text})
				if _, held := model[seq]; !held { // a chunk of a seq held already is a redelivery
					model[seq] = text
				}
			}
			if rng.IntN(2) == 0 { // another message's events in the same transaction
				evs = append(evs, cdc.Event{Kind: cdc.ChunkDeleted, StreamID: "other", Seq: 3})
			}
			xid++
			v.apply(&cdc.Tx{Xid: xid, Events: evs})
			e := v.entries["s"]
			require.NotNil(t, e, "seed %d", seed)
			var want []chunk
			bytes := 0
			for seq, text := range model {
				want = append(want, chunk{seq: seq, text: text})
				bytes += len(text)
			}
			sort.Slice(want, func(i, j int) bool { return want[i].seq < want[j].seq })
			if len(want) == 0 {
				want = nil
			}
			got := e.chunks
			if len(got) == 0 {
				got = nil
			}
			require.Equal(t, want, got, "seed %d", seed)
			require.Equal(t, bytes, e.chunkBytes, "seed %d", seed)
		}
	}
}
