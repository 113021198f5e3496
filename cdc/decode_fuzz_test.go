package cdc

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"strings"
	"testing"

	"github.com/rindle-sh/rindle-go/checkpoint"
	"github.com/rindle-sh/rindle-go/producer"
)

// pgoutput message builders, for seeds.
func cstr(s string) []byte { return append([]byte(s), 0) }

func relationMsg(id uint32, name string, cols ...string) []byte {
	b := []byte{'R'}
	b = binary.BigEndian.AppendUint32(b, id)
	b = append(b, cstr("public")...)
	b = append(b, cstr(name)...)
	b = append(b, 'd')
	b = binary.BigEndian.AppendUint16(b, uint16(len(cols)))
	for i, c := range cols {
		flag := byte(0)
		if i == 0 {
			flag = 1
		}
		b = append(b, flag)
		b = append(b, cstr(c)...)
		b = binary.BigEndian.AppendUint32(b, 25)
		b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
	}
	return b
}

func tuple(vals ...string) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(vals)))
	for _, v := range vals {
		switch v {
		case "\x00u":
			b = append(b, 'u')
			continue
		case "\x00n":
			b = append(b, 'n')
			continue
		}
		b = append(b, 't')
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	return b
}

func beginMsg(xid uint32) []byte {
	b := []byte{'B'}
	b = binary.BigEndian.AppendUint64(b, 100)
	b = binary.BigEndian.AppendUint64(b, 0)
	return binary.BigEndian.AppendUint32(b, xid)
}

func commitMsg() []byte {
	b := []byte{'C', 0}
	b = binary.BigEndian.AppendUint64(b, 90)
	b = binary.BigEndian.AppendUint64(b, 100)
	return binary.BigEndian.AppendUint64(b, 0)
}

func insertMsg(rel uint32, vals ...string) []byte {
	b := []byte{'I'}
	b = binary.BigEndian.AppendUint32(b, rel)
	b = append(b, 'N')
	return append(b, tuple(vals...)...)
}

func deleteMsg(rel uint32, vals ...string) []byte {
	b := []byte{'D'}
	b = binary.BigEndian.AppendUint32(b, rel)
	b = append(b, 'K')
	return append(b, tuple(vals...)...)
}

func updateMsg(rel uint32, vals ...string) []byte {
	b := []byte{'U'}
	b = binary.BigEndian.AppendUint32(b, rel)
	b = append(b, 'N')
	return append(b, tuple(vals...)...)
}

const sep = "\xfe\xfd"

func validSequence() []byte {
	msgs := [][]byte{
		relationMsg(1, "message_chunks", "stream_id", "seq", "text"),
		relationMsg(2, "messages", "id", "body", "seq", "status", "error"),
		beginMsg(7),
		insertMsg(1, "a:b", "5", "hé😀"),
		updateMsg(2, "a:b", "\x00u", "5", "streaming", "x"),
		deleteMsg(1, "a:b", "5", "\x00n"),
		commitMsg(),
	}
	return bytes.Join(msgs, []byte(sep))
}

// TestDecoderOnAHandBuiltSequence pins the seed the fuzzer starts from.
func TestDecoderOnAHandBuiltSequence(t *testing.T) {
	d := newDecoder(checkpoint.DefaultTables())
	var done *Tx
	for _, m := range bytes.Split(validSequence(), []byte(sep)) {
		tx, err := d.feed(m)
		if err != nil {
			t.Fatal(err)
		}
		if tx != nil {
			done = tx
		}
	}
	if done == nil || len(done.Events) != 3 {
		t.Fatalf("got %+v", done)
	}
	if e := done.Events[0]; e.Kind != ChunkAppended || e.StreamID != "a:b" || e.Seq != 5 || e.From() != producer.Seq(1) {
		t.Fatalf("chunk event %+v", e)
	}
	if e := done.Events[1]; e.Kind != MessageChanged || e.Body != nil || e.Status != "streaming" {
		t.Fatalf("message event %+v: an unchanged TOAST body must be nil", e)
	}
	if e := done.Events[2]; e.Kind != ChunkDeleted || e.StreamID != "a:b" || e.Seq != 5 {
		t.Fatalf("delete event %+v", e)
	}
}

// TestDecoderReadsAChunkDeleteByEitherKey: the project's chunk key is (stream, seq); a mapping
// with a text chunk key (the seed's "<stream>:<seq>") names the stream in it, and a table whose
// replica identity carries neither is refused with what to fix.
func TestDecoderReadsAChunkDeleteByEitherKey(t *testing.T) {
	seed := checkpoint.Tables{Columns: checkpoint.Columns{ChunkKey: "id"}}
	cases := []struct {
		name   string
		tables checkpoint.Tables
		rel    []byte
		del    []byte
		err    string
	}{
		{"StreamAndSeq", checkpoint.DefaultTables(), relationMsg(1, "message_chunks", "stream_id", "seq", "text"), deleteMsg(1, "a:b", "7", "\x00n"), ""},
		{"TextKey", seed, relationMsg(1, "message_chunks", "id", "stream_id", "seq", "text"), deleteMsg(1, "a:b:7", "\x00n", "\x00n", "\x00n"), ""},
		{"TextKeyNullFallsBackToStream", seed, relationMsg(1, "message_chunks", "id", "stream_id", "seq", "text"), deleteMsg(1, "\x00n", "a:b", "7", "\x00n"), ""},
		{"Neither", checkpoint.DefaultTables(), relationMsg(1, "message_chunks", "stream_id", "seq", "text"), deleteMsg(1, "\x00n", "\x00n", "\x00n"), "replica identity must include the stream column"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newDecoder(tc.tables)
			var done *Tx
			var err error
			for _, m := range [][]byte{tc.rel, beginMsg(7), tc.del, commitMsg()} {
				var tx *Tx
				if tx, err = d.feed(m); err != nil {
					break
				}
				if tx != nil {
					done = tx
				}
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if done == nil || len(done.Events) != 1 || done.Events[0].Kind != ChunkDeleted || done.Events[0].StreamID != "a:b" || done.Events[0].Seq != 7 {
				t.Fatalf("got %+v", done)
			}
		})
	}
}

// A row message whose tuple claims a column longer than the message is refused before anything
// is allocated for it. pglogrepl sizes a column's buffer by the length the message claims, and
// reads an update's new tuple one byte past its old tuple without checking that byte is 'N', so
// the framing check must follow the same grammar: FuzzDecode's workers grew to 5.7 GB and were
// killed on an update whose old tuple was followed by a byte other than 'N' and then a column
// claiming 2 GB.
func TestDecoderRefusesAClaimedLengthBeforeAllocatingIt(t *testing.T) {
	huge := []byte{0, 1, 't', 0x7f, 0xff, 0xff, 0xff, 'x'} // one text column claiming 2 GB
	rel := func(kind byte, rest ...byte) []byte {
		return append(binary.BigEndian.AppendUint32([]byte{kind}, 1), rest...)
	}
	for name, msg := range map[string][]byte{
		"update, old key then not N":     rel('U', append([]byte{'K', 0, 0, '*'}, huge...)...),
		"update, old row then not N":     rel('U', append([]byte{'O', 0, 0, 'Q'}, huge...)...),
		"update, old key then N":         rel('U', append([]byte{'K', 0, 0, 'N'}, huge...)...),
		"update, new row":                rel('U', append([]byte{'N'}, huge...)...),
		"insert":                         rel('I', append([]byte{'N'}, huge...)...),
		"delete":                         rel('D', append([]byte{'K'}, huge...)...),
		"update, old key and no new row": rel('U', 'K', 0, 0),
		"update, no tuple kind":          rel('U', 'Z', 0, 0),
	} {
		t.Run(name, func(t *testing.T) {
			d := newDecoder(checkpoint.DefaultTables())
			if _, err := d.feed(relationMsg(1, "messages", "id")); err != nil {
				t.Fatal(err)
			}
			if _, err := d.feed(beginMsg(7)); err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := d.feed(msg)
			runtime.ReadMemStats(&after)
			if err == nil {
				t.Fatal("a malformed row message was taken")
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
				t.Fatalf("refusing it allocated %d bytes (%v)", grew, err)
			}
		})
	}
}

// FuzzDecode feeds arbitrary messages to the decoder: every input is decoded or refused with an
// error, never a panic, and whatever decodes is well formed.
func FuzzDecode(f *testing.F) {
	f.Add(validSequence())
	f.Add([]byte{})
	f.Add([]byte("B"))
	f.Add([]byte("R\x00\x00\x00\x01"))
	f.Add(append([]byte("I\x00\x00\x00\x01N\xff\xff"), sep...))
	f.Fuzz(func(t *testing.T, data []byte) {
		d := newDecoder(checkpoint.DefaultTables())
		for _, m := range bytes.Split(data, []byte(sep)) {
			tx, err := d.feed(m)
			if err != nil || tx == nil {
				continue
			}
			for _, e := range tx.Events {
				switch e.Kind {
				case ChunkAppended, ChunkDeleted, MessageChanged, MessageDeleted, Truncated:
				default:
					t.Fatalf("unknown event kind %q", e.Kind)
				}
			}
		}
	})
}
