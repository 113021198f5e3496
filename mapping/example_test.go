package mapping_test

import (
	"fmt"

	"github.com/rindle-sh/rindle-go/mapping"
)

// An app maps its own tables: the names it gives are kept, every other name takes its default,
// and the opt-in columns it leaves empty stay unused.
func ExampleTables_Resolved() {
	t, err := mapping.Tables{Message: "answers", Columns: mapping.Columns{Body: "content", Owner: "user_id"}}.Resolved()
	if err != nil {
		panic(err)
	}
	fmt.Println(t.Message, t.Chunks, t.Columns.Key, t.Columns.Body, t.Columns.Seq, t.Columns.Owner, t.Columns.Cancel == "")
	_, err = mapping.Tables{Message: `bad"name`}.Resolved()
	fmt.Println(err)
	// Output:
	// answers message_chunks id content seq user_id true
	// mapping: Tables.Message: "bad\"name" contains a double quote or NUL; rename it rather than escape it
}

// A chunk key names its stream and its end offset; a stream id may itself hold colons.
func ExampleParseChunkID() {
	key := mapping.ChunkID("chat:7:msg", 42)
	id, seq, err := mapping.ParseChunkID(key)
	fmt.Println(key, id, seq, err)
	// Output: chat:7:msg:42 chat:7:msg 42 <nil>
}
